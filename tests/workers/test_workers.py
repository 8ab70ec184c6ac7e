"""``Fleet(workers=2)`` against the HTTP simulator on loopback: the same transcripts as one
process, the fleet's concurrency limit counted at the server, a killed worker's sessions
failed (and the run ended), and no worker process left behind."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import types
from collections.abc import Sequence

import pytest

from agentflow import Agent, ConfigError, Event, Fleet, HTTPTransport, Limits, WorkerError
from agentflow.embedded import SimTransport
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver
from agentflow.sim.records import RequestRecord
from agentflow.store import SQLiteStore
from tests.sched.conftest import QUICK, RecordingSim, max_in_window, peak_overlap
from tests.workers.tools import counted_workload, workload


def intervals(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    out = []
    for r in records:
        assert r.finished_s is not None
        out.append((r.arrival_s, r.finished_s))
    return out


def workers_now() -> set[int]:
    """Pids of this process's live worker children."""
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def gone(pid: int) -> bool:
    """Whether no process runs as ``pid``: none has it, or it is a zombie (dead, waiting
    for a parent to reap it — in a container whose PID 1 reaps no orphans, a killed
    parent's workers stay zombies)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state == "Z"


class Seen:
    """A parent-side callback: what arrived, and the worker pids seen while it did.
    It reads every event but tokens."""

    event_types = frozenset(
        {"tool_call", "tool_result", "turn_end", "session_end", "fleet_start", "fleet_end"}
    )

    def __init__(self) -> None:
        self.types: dict[str, int] = {}
        self.pids: set[int] = set()

    def __call__(self, event: Event) -> None:
        self.types[event.type] = self.types.get(event.type, 0) + 1
        self.pids |= workers_now()


async def test_same_transcripts_as_one_process() -> None:
    """Same seed, same session ids: every session's messages and ending are the same
    whether one process or two workers ran them; the caller's sessions hold them; the
    parent's callback saw every turn."""
    async with RecordingSim(seed=3) as sim, HTTPTransport(sim.base_url) as http:
        one = await Fleet(http, max_concurrency=4).run(workload(12))
    seen = Seen()
    mine = workload(12)
    async with RecordingSim(seed=3) as sim, HTTPTransport(sim.base_url) as http:
        two = await Fleet(http, max_concurrency=4, workers=2, callbacks=[seen]).run(mine)
    assert not one.failed
    assert not two.failed, [s.error for s in two.failed]
    assert [s.session_id for s in two.sessions] == [f"s{i}" for i in range(12)]
    for a, b, session in zip(one.sessions, two.sessions, mine, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
        # the caller's Session objects end as if they had run here
        assert session.result is b
        assert session.messages == b.messages
        assert len(session.turns) == len(a.turns)
    turns = sum(len(s.turns) for s in two.sessions)
    assert seen.types["turn_end"] == turns == 18
    assert seen.types["session_end"] == 12
    assert seen.types["fleet_start"] == seen.types["fleet_end"] == 1
    assert "token" not in seen.types  # nobody asked: workers did not send them
    assert len(seen.pids) == 2
    assert all(gone(p) for p in seen.pids)


async def test_tokens_forwarded_when_a_callback_reads_them() -> None:
    """A token callback in the parent gets every output delta the workers streamed."""
    chars: dict[str, int] = {}

    def count(event: Event) -> None:
        if event.type == "token" and event.kind == "content":
            chars[event.session_id] = chars.get(event.session_id, 0) + len(event.text)

    async with RecordingSim(seed=1) as sim, HTTPTransport(sim.base_url) as http:
        result = await Fleet(http, workers=2, callbacks=[count]).run(workload(4))
    for s in result.sessions:
        assert s.final_output is not None
        text = "".join(m.get("content") or "" for m in s.messages if m["role"] == "assistant")
        assert chars[s.session_id] == len(text) > 0


async def test_stream_yields_every_event_and_ends_with_the_fleet_end() -> None:
    """``Fleet.stream`` with workers: tokens and turns from both workers, one
    ``fleet_start`` first and one ``fleet_end`` last, holding every result."""
    types: list[str] = []
    async with RecordingSim(seed=2) as sim, HTTPTransport(sim.base_url) as http:
        async for event in Fleet(http, workers=2).stream(workload(6)):
            types.append(event.type)
            last = event
    assert types[0] == "fleet_start"
    assert types[-1] == "fleet_end"
    assert types.count("fleet_end") == types.count("fleet_start") == 1
    assert types.count("session_end") == 6
    assert types.count("turn_end") == 9
    assert "token" in types
    assert last.type == "fleet_end"
    assert [s.session_id for s in last.result.sessions] == [f"s{i}" for i in range(6)]


async def test_an_async_callback_has_every_event_when_run_returns() -> None:
    """An async callback in the parent has handled every forwarded turn by the time
    ``Fleet.run`` returns (the run waits for the bus, as in one process)."""
    ended: list[str] = []

    async def on_event(event: Event) -> None:
        await asyncio.sleep(0)
        if event.type == "turn_end":
            ended.append(event.session_id)

    async with RecordingSim(seed=4) as sim, HTTPTransport(sim.base_url) as http:
        result = await Fleet(http, workers=2, callbacks=[on_event]).run(workload(8))
    assert len(ended) == sum(len(s.turns) for s in result.sessions) == 12


async def test_max_concurrency_holds_at_the_server_across_workers() -> None:
    """60 sessions on two workers with max_concurrency=3: the server never had more
    than 3 requests at once (each worker alone would have been allowed all 3), nor did
    ``Fleet.in_flight`` in the parent ever read more."""
    samples: list[int] = []
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=3, workers=2)
        fleet.subscribe(lambda e: samples.append(fleet.in_flight))
        result = await fleet.run(workload(60))
    assert not result.failed
    assert samples and max(samples) <= 3  # as the workers told the parent
    assert fleet.in_flight == fleet.queued == 0
    assert len(sim.records) == sum(len(s.turns) for s in result.sessions) == 90
    assert peak_overlap(intervals(sim.records)) <= 3
    assert 0 < result.peak_in_flight <= 3
    assert result.replicas[0].served == 90


async def test_requests_per_minute_hold_at_the_server_across_workers() -> None:
    """rpm=1,200 (20 a second, a 1 s burst) over two workers: in every window the server
    received at most rate × window + burst requests, counted from its own arrivals."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, workers=2, limits=Limits(rpm=1200))
        result = await fleet.run(workload(40))
    assert not result.failed
    arrivals = [r.arrival_s for r in sim.records]
    assert len(arrivals) == 60
    for window_s in (0.0, 0.25, 0.5, 1.0, 2.0):
        # + 1: the limit holds on the client's clock; arrival at the server adds a transit
        # delay that varies (a loaded machine), which can bring one request closer.
        assert max_in_window(arrivals, window_s) <= 20 * window_s + 20 + 1


async def test_tokens_per_minute_hold_at_the_server_across_workers() -> None:
    """tpm=60,000 (1,000 a second, a 1 s burst) over two workers, with exact prompt
    counts: in every window the server received at most rate × window + burst tokens
    (prompt + max_tokens of each request, from its own records)."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=16, workers=2, limits=Limits(tpm=60_000))
        result = await fleet.run(counted_workload(40))
    assert not result.failed
    arrivals = [r.arrival_s for r in sim.records]
    weights = [r.prompt_tokens + r.max_tokens for r in sim.records]
    assert len(arrivals) == 60
    for window_s in (0.0, 0.5, 1.0, 2.0, 4.0):
        # + one request: the limit holds on the client's clock; arrival at the server adds
        # a transit delay that varies (a loaded machine), which can bring one closer.
        assert max_in_window(arrivals, window_s, weights) <= 1000 * window_s + 1000 + max(weights)


async def test_a_killed_worker_fails_its_sessions_and_the_run_ends() -> None:
    """SIGKILL one worker on the first finished turn: its unfinished sessions end with a
    WorkerError naming it, the other worker's all complete, nothing is left running."""
    victims: list[int] = []

    def kill_one(event: Event) -> None:
        if event.type == "turn_end" and not victims:
            pid = min(workers_now())
            victims.append(pid)
            os.kill(pid, signal.SIGKILL)

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=2, workers=2, callbacks=[kill_one])
        result = await fleet.run(workload(40))
    failed = result.failed
    assert failed, "the killed worker had sessions left"
    assert len(failed) < 40
    for s in failed:
        assert isinstance(s.error, WorkerError)
        assert s.error.exitcode == -signal.SIGKILL
        assert f"ended (exit code {-signal.SIGKILL})" in str(s.error)
    assert {s.error.worker for s in failed if isinstance(s.error, WorkerError)} == {
        failed[0].error.worker  # type: ignore[union-attr]
    }
    assert sum(s.ok for s in result.sessions) + len(failed) == 40
    assert not workers_now()
    assert gone(victims[0])


async def test_sigterm_to_a_worker_cancels_its_sessions_in_order() -> None:
    """SIGTERM one worker mid-run: it ends its run as a cancel does — its unfinished
    sessions end ``cancelled`` with the turns they finished, not as a crash — and the
    other worker's sessions all complete."""
    victims: list[int] = []

    def term_one(event: Event) -> None:
        # The worker that ran this turn (sessions are dealt round-robin: s<k> is on
        # worker k % 2), so the signal meets a worker whose run is going, not one that
        # may still be starting.
        if event.type == "turn_end" and not victims:
            name = f"agentflow-worker-{int(event.session_id[1:]) % 2}"
            (pid,) = (p.pid for p in multiprocessing.active_children() if p.name == name)
            assert pid is not None
            victims.append(pid)
            os.kill(pid, signal.SIGTERM)

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=2, workers=2, callbacks=[term_one])
        result = await fleet.run(workload(40))
    statuses = [s.status for s in result.sessions]
    assert "cancelled" in statuses
    assert set(statuses) == {"completed", "cancelled"}
    assert not any(isinstance(s.error, WorkerError) for s in result.sessions)
    assert not workers_now()
    assert gone(victims[0])


async def test_cancel_stops_the_workers_and_keeps_partial_results() -> None:
    """Cancelling the run after its first turn: the workers stop, every session has a
    result on it (completed or cancelled), and no worker is left."""
    sessions = workload(40)
    first = asyncio.Event()
    pids: set[int] = set()

    def on_turn(event: Event) -> None:
        if event.type == "turn_end":
            pids.update(workers_now())
            first.set()

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=2, workers=2, callbacks=[on_turn])
        task = asyncio.create_task(fleet.run(sessions))
        await asyncio.wait_for(first.wait(), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    statuses = [s.result.status for s in sessions if s.result is not None]
    assert len(statuses) == 40
    assert "cancelled" in statuses
    assert set(statuses) <= {"completed", "cancelled"}
    assert not workers_now()
    assert pids and all(gone(p) for p in pids)


async def test_workers_die_with_a_killed_parent() -> None:
    """SIGKILL the parent process mid-run: the kernel's death signal (and the closed
    pipe) ends both of its workers; the test waits for that with a bound."""
    async with RecordingSim() as sim:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.workers.parent",
            sim.base_url,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            pids = [int(p) for p in line.split()]
            assert len(pids) == 2
            assert not any(gone(p) for p in pids)
            proc.kill()
            await asyncio.wait_for(proc.wait(), 30)
            for _ in range(300):  # at most 30 s
                if all(gone(p) for p in pids):
                    break
                await asyncio.sleep(0.1)
            assert all(gone(p) for p in pids)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_a_worker_that_cannot_load_its_sessions_fails_them_with_the_reason() -> None:
    """A tool from a module only the parent has (made at run time, as in a notebook)
    pickles here but not in a worker: that worker's sessions fail with a WorkerError that
    says why, and the run still ends."""
    module = types.ModuleType("agentflow_test_parent_only")
    source = 'def probe(key: str) -> str:\n    """Parent-only."""\n    return key\n'
    exec(source, module.__dict__)
    sys.modules[module.__name__] = module
    try:
        agent = Agent(name="notebook", model="m", tools=[module.probe])
        sessions = [agent.session(f"q{i}", session_id=f"n{i}") for i in range(4)]
        async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
            result = await Fleet(http, workers=2).run(sessions)
    finally:
        del sys.modules[module.__name__]
    assert len(result.failed) == 4
    for s in result.failed:
        assert isinstance(s.error, WorkerError)
        assert "No module named 'agentflow_test_parent_only'" in str(s.error)
    assert not workers_now()


def local_tool() -> Agent:
    def secret(key: str) -> str:
        """Not importable from a worker."""
        return key

    return Agent(name="closure", model="m", tools=[secret])


async def test_what_does_not_pickle_is_named() -> None:
    """A closure tool is refused before any worker starts, naming the agent and tool;
    so are the in-process simulator, a custom clock and bad worker counts (a store is
    taken)."""
    fleet = Fleet(HTTPTransport("http://127.0.0.1:9"), workers=2)
    with pytest.raises(ConfigError, match=r"agent 'closure': tool 'secret' does not pickle"):
        await fleet.run([local_tool().session("hi")])
    assert not workers_now()
    # A fleet budget is one object in one process: copies in workers would never stop.
    from agentflow.context import ContextBudget, FleetBudget

    for context in (FleetBudget(max_tokens=1000), [FleetBudget(max_tokens=1000),
                                                   ContextBudget(window=10_000)]):  # fmt: skip
        budgeted = Agent(name="budgeted", model="m", context=context)
        with pytest.raises(ConfigError, match=r"agent 'budgeted': a FleetBudget counts"):
            await fleet.run([budgeted.session("hi")])
    assert not workers_now()
    with pytest.raises(ConfigError, match="workers must be an int"):
        Fleet(HTTPTransport("http://127.0.0.1:9"), workers=0)
    with pytest.raises(ConfigError, match="custom clock= or sleep="):
        await Fleet(HTTPTransport("http://127.0.0.1:9"), workers=2, clock=lambda: 0).run(
            workload(1)
        )
    sim = SimTransport(EngineDriver(Engine(QUICK, seed=0)))
    with pytest.raises(ConfigError, match="cannot share the in-process SimTransport"):
        await Fleet(sim, workers=2).run(workload(1))
    store = SQLiteStore(":memory:")  # taken since issue 15 part 4 (test_workers_store.py)
    assert Fleet(HTTPTransport("http://127.0.0.1:9"), workers=2, store=store).store is store
    assert not workers_now()


async def test_retried_server_errors_in_a_workers_results_reach_the_parent() -> None:
    """Half the requests answer 500 and are retried: each finished turn carries its
    failed attempts' ServerErrors. Their pickles used to fail in the parent (keyword-only
    arguments), which then took the worker for dead and failed its sessions. Now every
    session completes, and the errors arrive as themselves."""
    from agentflow import RetryPolicy, ServerError
    from agentflow.sim import FaultConfig

    retry = RetryPolicy(max_attempts=20, backoff_s=0.001, max_backoff_s=0.002, jitter=False)
    faults = FaultConfig(server_error=0.5, seed=5)
    async with RecordingSim(faults=faults) as sim, HTTPTransport(sim.base_url) as http:
        two = await Fleet(http, max_concurrency=4, workers=2, retry=retry).run(workload(12))
    assert not two.failed, [s.error for s in two.failed]
    failed = [a for s in two.sessions for t in s.turns for a in t.failed_attempts]
    assert failed and two.retries == len(failed)
    assert all(isinstance(a.error, ServerError) and a.error.status == 500 for a in failed)
