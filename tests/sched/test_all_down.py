"""When every replica is down, every waiting turn fails — with :class:`AllReplicasDown`
naming each replica and its last error — within ``RetryPolicy.give_up_after_s``.

The servers are real simulators on loopback, stopped mid-run. The virtual-time tests
check the bound on the virtual clock (exact, and taking no wall time); the last test
runs on the real clock with a server in its own process, killed, and checks only what
happened (a generous hang guard, no duration).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

from agentflow import (
    Agent,
    AllReplicasDown,
    ConnectError,
    Event,
    Fleet,
    FleetResult,
    HTTPTransport,
    Replica,
    RetryEvent,
    RetryPolicy,
    ServerError,
    SessionEndEvent,
    Timeouts,
    TransportError,
    TurnEndEvent,
)
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sim.faults import FaultConfig
from agentflow.transport import AiohttpTransport, ChatRequest
from tests.sched.conftest import RecordingSim
from tests.wait import read_line


async def lookup(key: str) -> str:
    """Look a key up (takes half a second)."""
    await asyncio.sleep(0.5)
    return f"value of {key}"


#: Two turns a session: a tool call, then the answer.
WORKER = Agent(
    name="worker",
    model="m",
    instructions="Use the tool.",
    tools=[lookup],
    params={"max_tokens": 32},
)


def _check_down(result: FleetResult, names: set[str]) -> list[AllReplicasDown]:
    """Every session either completed or failed with AllReplicasDown naming ``names``,
    each with a wire error; returns those errors."""
    downs: list[AllReplicasDown] = []
    for s in result.sessions:
        if s.status == "completed":
            continue
        assert isinstance(s.error, AllReplicasDown), (s.status, s.error)
        assert set(s.error.replicas) == names
        assert all(isinstance(e, TransportError) for e in s.error.replicas.values())
        for name in names:
            assert repr(name) in str(s.error)
        assert isinstance(s.error.__cause__, TransportError)  # the turn's own last error
        downs.append(s.error)
    return downs


def test_both_replicas_stopped_mid_run_every_session_ends_within_give_up_after_s() -> None:
    """Two replicas, 30 sessions, 8 in flight; both servers stop once 10 turns have
    ended. ``max_attempts`` is out of reach (1,000) and backoff is capped at 2 s, so
    only ``give_up_after_s=30`` can end the waiting turns: every session that had not
    completed fails with AllReplicasDown naming both replicas, and each ends within
    30 s of virtual time of its turn's first attempt — so the run ends within 30 s of
    the stop plus the time the last turn was queued behind the others."""
    give_up = 30.0

    async def main() -> tuple[FleetResult, float, dict[str, float], dict[str, float]]:
        sims = [RecordingSim(seed=i) for i in range(2)]
        for sim in sims:
            await sim.server.start()
        http = [HTTPTransport(sim.base_url, clock=loop_clock) for sim in sims]
        loop = asyncio.get_running_loop()
        stopped: list[float] = []
        stopper: list[asyncio.Task[None]] = []
        ended: dict[str, float] = {}
        first_try: dict[str, float] = {}  # the failing turn's first attempt, per session
        turns = 0

        def on_event(event: Event) -> None:
            nonlocal turns
            if isinstance(event, TurnEndEvent):
                turns += 1
                if turns == 10:
                    stopped.append(loop.time())

                    async def stop() -> None:
                        await asyncio.gather(*(sim.server.stop() for sim in sims))

                    stopper.append(loop.create_task(stop()))
            elif isinstance(event, RetryEvent) and event.attempt.attempt == 0:
                first_try[event.session_id] = loop.time()  # approximately: at its failure
            elif isinstance(event, SessionEndEvent):
                ended[event.session_id] = loop.time()

        replicas = [
            Replica(transport=t, name=n) for t, n in zip(http, ("east", "west"), strict=True)
        ]
        policy = RetryPolicy(
            max_attempts=1000, backoff_s=0.25, max_backoff_s=2.0, give_up_after_s=give_up
        )
        fleet = Fleet(
            replicas, retry=policy, clock=loop_clock, max_concurrency=8, callbacks=[on_event]
        )
        try:
            result = await fleet.run(
                WORKER.session(f"task {i}", session_id=f"s{i}") for i in range(30)
            )
            await asyncio.gather(*stopper)
        finally:
            for t in http:
                await t.aclose()
            for sim in sims:
                await sim.server.stop()
        return result, stopped[0], ended, first_try

    result, stopped, ended, first_try = run_virtual(main())
    downs = _check_down(result, {"east", "west"})
    assert len(downs) >= 15  # most sessions were still running when the servers stopped
    failed = {s.session_id for s in result.sessions if s.status != "completed"}
    for sid in failed:
        assert ended[sid] >= stopped
        if sid in first_try:  # its failing turn was retried: it gave up in time
            assert ended[sid] - first_try[sid] <= give_up + 1e-6
    assert max(ended.values()) - stopped <= give_up + 5.0
    # Each failed session retried until the limit (max_attempts was out of reach).
    retried = [s for s in result.sessions if s.status != "completed" and s.session_id in first_try]
    assert retried and all(ended[s.session_id] - stopped >= give_up - 5.0 for s in retried)


def test_a_wait_chosen_before_the_fleet_went_down_is_cut_at_give_up_after_s() -> None:
    """One replica answers every request with 503 and ``Retry-After: 100`` (a gateway in
    front of dead servers). The first turns fail before the breaker has seen enough
    failures to judge the fleet down, and start waiting 100 s; the later ones fail with
    the fleet already down, and give up at once rather than wait past the limit. The
    early waits are cut at 20 s, for one last attempt: every session ends with
    AllReplicasDown within 20 s of virtual time, not after 100 s."""

    async def main() -> tuple[FleetResult, float, list[float]]:
        faults = FaultConfig(unavailable=1.0, retry_after_s=100.0)
        async with (
            RecordingSim(faults=faults) as sim,
            HTTPTransport(sim.base_url, clock=loop_clock) as http,
        ):
            loop = asyncio.get_running_loop()
            start = loop.time()
            policy = RetryPolicy(max_attempts=10, give_up_after_s=20.0)
            fleet = Fleet(Replica(transport=http, name="gw"), retry=policy, clock=loop_clock)
            result = await fleet.run(WORKER.session(f"task {i}") for i in range(10))
            return result, loop.time() - start, [s.at - start for s in sim.seen]

    result, took, arrivals = run_virtual(main())
    downs = _check_down(result, {"gw"})
    assert len(downs) == 10
    for err in downs:
        last = err.replicas["gw"]
        assert isinstance(last, ServerError) and last.status == 503
    assert took <= 20.0 + 1e-6
    early = [t for t in arrivals if t > 1.0]
    assert early and all(abs(t - 20.0) < 1e-3 for t in early)  # the one last attempts
    assert len(arrivals) == 10 + len(early)


def test_the_default_policy_ends_a_dead_fleet_in_a_few_attempts() -> None:
    """With the default RetryPolicy, a lone replica stopped before the run: each turn
    gets its 4 attempts (connection refused at once, jittered backoff ≤ 0.5 + 1 + 2 s)
    and fails with AllReplicasDown — the fleet does not wait on its breaker."""

    async def main() -> tuple[FleetResult, float]:
        sim = RecordingSim()
        await sim.server.start()
        base = sim.base_url
        await sim.server.stop()
        async with HTTPTransport(base, clock=loop_clock) as http:
            loop = asyncio.get_running_loop()
            start = loop.time()
            fleet = Fleet(Replica(transport=http, name="only"), clock=loop_clock)
            result = await fleet.run(WORKER.session(f"task {i}") for i in range(64))
            return result, loop.time() - start

    result, took = run_virtual(main())
    downs = _check_down(result, {"only"})
    assert len(downs) == 64 and result.retries == 64 * 3
    assert all(isinstance(d.replicas["only"], ConnectError) for d in downs)
    assert took <= 3.5 + 1e-6
    (replica,) = result.replicas
    assert replica.breaker_opened == 0 and replica.failures == 64 * 4


# --- Over real HTTP on the real clock, the server's process killed ------------------------


@contextlib.contextmanager
def sim_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m agentflow.sim`` on a free port, in its own process."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentflow.sim",
            "--port",
            "0",
            "--quiet",
            "--tool-rounds",
            "1",
            "--answer-tokens",
            "4:8",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout is not None
        line = read_line(proc.stdout, "the simulator's address line")
        assert " at http://" in line, line
        yield proc, line.split(" at ", 1)[1].split()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


async def test_a_killed_server_process_ends_every_session() -> None:
    """Real HTTP, real clock: the simulator runs in its own process, killed (SIGKILL)
    once 20 turns have ended. Every session ends — completed, or with AllReplicasDown
    naming the replica (its last error a refused or dropped connection) — and none
    hangs (a generous guard; no duration is asserted)."""
    with sim_process() as (proc, base):
        turns = 0

        def on_event(event: Event) -> None:
            nonlocal turns
            if isinstance(event, TurnEndEvent):
                turns += 1
                if turns == 20:
                    os.kill(proc.pid, signal.SIGKILL)

        async with HTTPTransport(base) as http:
            fleet = Fleet(
                Replica(transport=http, name="sim"),
                retry=RetryPolicy(backoff_s=0.05, max_backoff_s=0.2),
                max_concurrency=16,
                callbacks=[on_event],
            )
            sessions = [WORKER.session(f"task {i}") for i in range(100)]
            result = await asyncio.wait_for(fleet.run(sessions), 120)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    completed = [s for s in result.sessions if s.status == "completed"]
    downs = _check_down(result, {"sim"})
    assert len(completed) + len(downs) == 100 and len(downs) >= 50
    assert turns >= 20
    for err in downs:
        assert isinstance(err.replicas["sim"], TransportError)


def test_a_refused_connection_leaves_no_idle_watchdog_behind() -> None:
    """Every attempt on a dead server arms the transport's idle watchdog before it
    connects; a refused connection must disarm it, or each failed attempt leaves a timer
    that fires ``idle`` seconds later on a finished timeout and raises in the loop
    (thousands of them in a fleet whose server died). On the virtual clock, well past
    the idle limit, the loop's exception handler saw nothing."""

    async def main() -> tuple[list[TransportError], list[dict[str, object]]]:
        loop = asyncio.get_running_loop()
        seen: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _, ctx: seen.append(ctx))
        sim = RecordingSim()
        await sim.server.start()
        base = sim.base_url
        await sim.server.stop()
        errors: list[TransportError] = []
        for make in (HTTPTransport, AiohttpTransport):
            async with make(base, timeouts=Timeouts(idle=1.0), clock=loop_clock) as transport:
                for _ in range(3):
                    try:
                        await transport.stream(ChatRequest(model="m", messages=[]))
                    except TransportError as exc:
                        errors.append(exc)
        await asyncio.sleep(5.0)  # past every idle limit
        return errors, seen

    errors, seen = run_virtual(main())
    assert len(errors) == 6 and all(isinstance(e, ConnectError) for e in errors)
    assert seen == []
