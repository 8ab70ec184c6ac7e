"""The scheduler: slots held exactly, cancellation that leaks nothing, prefix warm-up,
rate waits only in the dispatcher, attained service, and breakers that wake it.

Timed behaviour runs on :func:`~agentflow.embedded.run_virtual` (the rate buckets use
the loop's clock), so waits are exact and nothing depends on the wall clock.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, Fleet, HTTPTransport, TurnTrace
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sched import Limits, RateGate, Replica, ReplicaState, Router, Scheduler, Ticket
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.sim.records import RequestRecord
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaKind, DeltaSink, Transport
from tests.sched.conftest import (
    QUICK,
    Acquirer,
    FakeClock,
    IdleTransport,
    settle,
    state,
    ticket,
)

_NS = 1_000_000_000


def scheduler(
    *replicas: Replica,
    clock: FakeClock | None = None,
    warmup: bool = False,
    max_in_flight: int | None = None,
    rpm: float | None = None,
    tpm: float | None = None,
    burst_s: float = 1.0,
) -> Scheduler:
    """A real scheduler over ``replicas`` (one idle one by default) with fleet limits."""
    return Scheduler(
        list(replicas) or [Replica(transport=IdleTransport())],
        limits=Limits(max_in_flight=max_in_flight, rpm=rpm, tpm=tpm, burst_s=burst_s),
        clock=clock or loop_clock,
        prefix_warmup=warmup,
    )


# --- Slots -----------------------------------------------------------------------------


async def test_max_in_flight_is_exact_under_many_concurrent_acquires() -> None:
    """500 tasks acquire at once, hold their grant for a varying number of loop turns and
    release: never more than the fleet cap (7) or a replica's own cap (4) at once, and
    the fleet cap is reached."""
    a = Replica(transport=IdleTransport("a"), limits=Limits(max_in_flight=4))
    b = Replica(transport=IdleTransport("b"), limits=Limits(max_in_flight=4))
    sched = scheduler(a, b, max_in_flight=7)
    held = peak = 0
    per_replica: dict[str, int] = {"a": 0, "b": 0}
    replica_peak: dict[str, int] = {"a": 0, "b": 0}

    async def one(i: int) -> None:
        nonlocal held, peak
        grant = await sched.acquire(ticket(f"s{i}"))
        held += 1
        peak = max(peak, held)
        name = grant.replica.name
        per_replica[name] += 1
        replica_peak[name] = max(replica_peak[name], per_replica[name])
        for _ in range(i % 5):
            await asyncio.sleep(0)
        held -= 1
        per_replica[name] -= 1
        sched.release(grant, used_tokens=None, ok=True)

    await asyncio.gather(*(one(i) for i in range(500)))
    assert peak == 7 and sched.peak_in_flight == 7
    assert max(replica_peak.values()) == 4 and min(replica_peak.values()) >= 3
    assert sched.in_flight == 0 and sched.dispatched == 500 and sched.waiting == 0
    assert [r.in_flight for r in sched.replicas] == [0, 0]
    assert [r.tokens_in_flight for r in sched.replicas] == [0, 0]
    await sched.aclose()


async def test_a_cancelled_queued_acquire_leaks_no_slot() -> None:
    sched = scheduler(max_in_flight=1)
    acq = Acquirer(sched)
    acq.submit(ticket("holder"))
    for i in range(6):
        acq.submit(ticket(f"q{i}"))
    await settle()
    assert acq.order == ["holder"] and sched.waiting == 6
    for i in (0, 2, 3, 5):  # cancelled while queued
        acq.tasks[f"q{i}"].cancel()
    await settle()
    acq.release("holder")
    await settle()
    assert acq.order == ["holder", "q1"]
    acq.release("q1")
    await settle()
    assert acq.order == ["holder", "q1", "q4"]
    acq.release("q4")
    await settle()
    assert sched.in_flight == 0 and sched.waiting == 0
    # The slot is free: the next acquire is granted at once.
    grant = await sched.acquire(ticket("next"))
    assert sched.in_flight == 1
    sched.release(grant, used_tokens=None, ok=True)
    await sched.aclose()


async def test_a_granted_then_cancelled_acquire_releases_its_slot() -> None:
    """The dispatcher hands a waiter its grant, and the waiter is cancelled before it runs:
    the grant goes back (the replica is not left counting a request nobody sends)."""
    sched = scheduler(max_in_flight=1)
    acq = Acquirer(sched)
    acq.submit(ticket("holder"))
    waiter = acq.submit(ticket("waiter"))
    await settle()
    acq.release("holder")
    await asyncio.sleep(0)  # the dispatcher runs and grants "waiter"; "waiter" has not run
    assert sched.in_flight == 1 and not waiter.done()
    waiter.cancel()
    await settle()
    assert waiter.cancelled()
    assert sched.in_flight == 0 and sched.replicas[0].in_flight == 0
    assert "waiter" not in acq.order
    grant = await sched.acquire(ticket("next"))
    sched.release(grant, used_tokens=None, ok=True)
    await sched.aclose()


def test_cancelled_while_the_dispatcher_waits_on_a_bucket() -> None:
    """The dispatcher keeps a slot for the ticket it waits on a rate bucket for (claimed,
    not in flight: nothing streams yet); if that session is cancelled meanwhile, the slot
    is freed once the wait ends."""

    async def main() -> None:
        sched = scheduler(max_in_flight=4, rpm=60.0)  # one request a second, burst 1
        acq = Acquirer(sched)
        acq.submit(ticket("first"))
        await settle()
        late = acq.submit(ticket("late"))
        await asyncio.sleep(0.5)
        # "late" keeps its slot while the bucket refills
        assert sched.in_flight == 1 and sched.claimed == 2 and sched.waiting == 1
        late.cancel()
        await asyncio.sleep(1.0)
        assert late.cancelled() and sched.in_flight == sched.claimed == 1
        assert sched.waiting == 0 and sched.dispatched == 1
        acq.release("first")
        assert sched.in_flight == 0
        await sched.aclose()

    run_virtual(main())


def test_an_oversized_charge_waits_in_the_dispatcher_not_past_the_cap() -> None:
    """A ticket bigger than the token bucket is charged in bucket-fulls. It must wait in
    the dispatcher: granted 'at once' it would wait with no slot held and no place in
    the queue, and a small ticket arriving meanwhile would pass the bucket check, take
    the only slot, and the big one would start on top of it (2 in flight with a cap of 1).
    """

    async def main() -> None:
        # 10 tokens/s, bucket of 10 tokens; x weighs 15, y weighs 2.
        sched = scheduler(max_in_flight=1, tpm=600.0, burst_s=1.0)
        acq = Acquirer(sched)
        acq.submit(ticket("x", prompt_tokens=10, max_output_tokens=5))
        await asyncio.sleep(0.3)
        acq.submit(ticket("y", prompt_tokens=1, max_output_tokens=1))
        await asyncio.sleep(5.0)
        assert sched.peak_in_flight == 1
        assert acq.order == ["x"]
        acq.release("x")
        await asyncio.sleep(5.0)
        assert acq.order == ["x", "y"] and sched.peak_in_flight == 1
        acq.release("y")
        await sched.aclose()

    run_virtual(main())


def test_token_debt_is_charged_before_the_next_dispatch() -> None:
    """A request reserved 50 tokens and the server says it used 150: the 100 of debt is
    charged with the next request, which waits for it (100 tokens/s, bucket of 100)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sched = scheduler(tpm=6000.0, burst_s=1.0)
        first = await sched.acquire(ticket("a", prompt_tokens=40, max_output_tokens=10))
        sched.release(first, used_tokens=150, ok=True)
        rates = sched._rates
        assert rates is not None and rates.charged_tokens == 150
        second = await sched.acquire(ticket("b", prompt_tokens=40, max_output_tokens=10))
        # 50 (level) + 150 charged in bucket-fulls: 100 once the bucket is empty (0.5 s),
        # then 50 more once half of it has drained again (1.0 s).
        assert abs(loop.time() - 1.0) < 1e-9
        assert rates.charged_tokens == 200
        sched.release(second, used_tokens=40, ok=True)  # used less: nothing is given back
        assert rates.charged_tokens == 200
        await sched.aclose()

    run_virtual(main())


async def test_kv_budget_of_a_replica() -> None:
    """A replica's kv_tokens caps prompt + max output in flight; one request always fits."""
    replica = Replica(transport=IdleTransport(), limits=Limits(kv_tokens=100))
    sched = scheduler(replica)
    acq = Acquirer(sched)
    for i in range(3):
        acq.submit(ticket(f"s{i}", prompt_tokens=30, max_output_tokens=10))  # 40 each
    await settle()
    assert acq.order == ["s0", "s1"] and sched.replicas[0].tokens_in_flight == 80
    acq.release("s0")
    acq.release("s1")
    await settle()
    acq.release("s2")
    huge = await sched.acquire(ticket("huge", prompt_tokens=500, max_output_tokens=100))
    assert sched.replicas[0].tokens_in_flight == 600
    sched.release(huge, used_tokens=None, ok=True)
    await sched.aclose()


# --- Per-replica rates ------------------------------------------------------------------


def test_a_replica_out_of_rate_is_skipped_while_another_has_room() -> None:
    """``slow`` allows one request a second, ``fast`` has no limits: 20 short turns go
    to ``fast`` once ``slow``'s bucket is empty, instead of the dispatcher waiting on
    ``slow``'s bucket (and queueing everything behind it) for 9 s."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        slow = Replica(transport=IdleTransport("slow"), limits=Limits(rpm=60.0))
        fast = Replica(transport=IdleTransport("fast"))
        sched = scheduler(slow, fast)
        where: list[str] = []

        async def one(i: int) -> None:
            grant = await sched.acquire(ticket(f"s{i}"))
            where.append(grant.replica.name)
            await asyncio.sleep(0.001)  # a 1 ms stream
            sched.release(grant, used_tokens=None, ok=True)

        await asyncio.gather(*(one(i) for i in range(20)))
        assert loop.time() < 0.1  # (virtual) 20 turns of 1 ms, 19 of them at once
        assert where.count("slow") == 1 and where.count("fast") == 19
        await sched.aclose()

    run_virtual(main())


def test_when_every_replica_is_out_of_rate_the_first_refill_wakes_the_dispatcher() -> None:
    """``slow`` refills one request every two seconds, ``quick`` one a second: after
    each has sent its burst, the next turn goes to ``quick`` at 1 s (not to ``slow``,
    listed first, at 2 s) — the dispatcher sleeps until the first refill, neither
    spinning nor waiting on the bucket of the replica it would have picked by load."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        router = CountingRouter()
        slow = Replica(transport=IdleTransport("slow"), limits=Limits(rpm=30.0))
        quick = Replica(transport=IdleTransport("quick"), limits=Limits(rpm=60.0))
        sched = Scheduler([slow, quick], router=router, clock=loop_clock, prefix_warmup=False)
        granted: list[tuple[str, float]] = []

        async def one(i: int) -> None:
            grant = await sched.acquire(ticket(f"s{i}"))
            granted.append((grant.replica.name, loop.time()))
            sched.release(grant, used_tokens=None, ok=True)

        await asyncio.gather(*(one(i) for i in range(4)))
        assert [n for n, _ in granted[:3]] == ["slow", "quick", "quick"]
        for (_, got), want in zip(granted, [0.0, 0.0, 1.0, 2.0], strict=True):
            assert want <= got <= want + 1e-3
        assert router.calls < 20, "the dispatcher spins while the buckets refill"
        await sched.aclose()

    run_virtual(main())


# --- Attained service --------------------------------------------------------------------


def test_a_wait_on_a_bucket_is_not_counted_as_service() -> None:
    """The fleet's bucket lets one 1,000-token turn through every 10 s: ``s2`` is
    granted at 10 s, and that is when its service starts — its streams took 0 s, so it
    has attained nothing (PLAS would otherwise rank its next turn 100 s later)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sched = scheduler(tpm=6000.0, burst_s=10.0)
        granted: dict[str, tuple[int, float]] = {}

        async def one(sid: str) -> None:
            grant = await sched.acquire(ticket(sid, prompt_tokens=500, max_output_tokens=500))
            granted[sid] = (grant.started_ns, loop.time())
            sched.release(grant, used_tokens=None, ok=True)  # a stream of 0 s

        await asyncio.gather(one("s1"), one("s2"))
        started_ns, at = granted["s2"]
        assert 10.0 <= at <= 10.0 + 1e-3 and abs(started_ns - at * _NS) < 1_000
        assert sched.state.attained_ns == {"s1": 0, "s2": 0}
        await sched.aclose()

    run_virtual(main())


async def test_attained_service_accumulates_per_session_and_forget_drops_it() -> None:
    clock = FakeClock()
    sched = scheduler(clock=clock)
    for seconds in (2.0, 1.5):
        grant = await sched.acquire(ticket("s1"))
        clock.advance(seconds)
        sched.release(grant, used_tokens=None, ok=True)
    grant = await sched.acquire(ticket("s2"))
    clock.advance(0.25)
    sched.release(grant, used_tokens=None, ok=True)
    assert sched.state.attained_ns == {"s1": 3_500_000_000, "s2": 250_000_000}
    t = ticket("s1")
    grant = await sched.acquire(t)
    assert t.attained_ns == 3_500_000_000  # what a policy sees when it ranks the ticket
    sched.release(grant, used_tokens=None, ok=True)
    assert sched.replicas[0].sessions == 2
    sched.forget("s1")
    assert "s1" not in sched.state.attained_ns and sched.replicas[0].sessions == 1
    t = ticket("s1")
    grant = await sched.acquire(t)
    assert t.attained_ns == 0
    sched.release(grant, used_tokens=None, ok=True)
    await sched.aclose()


# --- Prefix warm-up --------------------------------------------------------------------


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []


class _FirstDelta:
    """Logs a stream's first delta, then passes deltas on."""

    def __init__(self, log: _Log, sid: str, inner: DeltaSink | None) -> None:
        self.log, self.sid, self.inner, self.seen = log, sid, inner, False

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        if not self.seen:
            self.seen = True
            self.log.events.append(("first", self.sid))
        if self.inner is not None:
            self.inner.on_delta(kind, text, t_ns)


class LoggingTransport:
    """Logs when each request starts and when its first delta arrives."""

    def __init__(self, inner: Transport, log: _Log) -> None:
        self.inner, self.log = inner, log

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        sid = request.headers.get("X-Session-ID", "?")
        self.log.events.append(("start", sid))
        return await self.inner.stream(request, _FirstDelta(self.log, sid, sink))

    async def aclose(self) -> None:
        await self.inner.aclose()


SHARED = Agent(name="shared", model="m", instructions="A long shared system prompt. " * 50)


async def _warmup_run(warmup: bool) -> tuple[list[tuple[str, str]], int]:
    slow = Reply(frames=Reply.text(" ".join(["w"] * 30)).frames, frame_delay_s=0.01)
    log = _Log()
    async with ScriptedServer([slow] * 6) as srv, HTTPTransport(srv.base_url) as http:
        fleet = Fleet(LoggingTransport(http, log), max_concurrency=16, prefix_warmup=warmup)
        result = await fleet.run(SHARED.session(f"task {i}") for i in range(6))
    assert all(s.ok for s in result.sessions)
    return log.events, srv.peak_in_flight


async def test_prefix_warmup_sends_one_request_until_its_first_token() -> None:
    """Six sessions share a cold prefix: the first is sent alone; the other five go only
    once its first token is in (its prefill is done), then all six stream at once."""
    events, server_peak = await _warmup_run(warmup=True)
    starts = [sid for kind, sid in events if kind == "start"]
    leader = starts[0]
    first_token = events.index(("first", leader))
    assert [kind for kind, _ in events[:first_token]] == ["start"]
    assert len(starts) == 6 and server_peak == 6  # then they fan out


async def test_without_warmup_all_go_at_once() -> None:
    events, server_peak = await _warmup_run(warmup=False)
    assert [kind for kind, _ in events[:6]] == ["start"] * 6
    assert server_peak == 6


def test_prefix_warmup_on_the_simulator() -> None:
    """Server-side ground truth (virtual time): every follower arrived after the leader's
    first token, and found the shared prefix in the cache."""

    async def main() -> list[RequestRecord]:
        engine = Engine(QUICK, seed=1, textgen=TextGenConfig(tool_rounds=0))
        driver = EngineDriver(engine)
        records: list[RequestRecord] = []
        driver.add_finish_hook(records.append)
        transport = SimTransport(driver)
        try:
            result = await Fleet(transport, clock=loop_clock).run(
                SHARED.session(f"task {i}") for i in range(8)
            )
        finally:
            await transport.aclose()
        assert all(s.ok for s in result.sessions)
        return records

    records = sorted(run_virtual(main()), key=lambda r: r.arrival_s)
    leader, followers = records[0], records[1:]
    assert len(followers) == 7 and leader.cached_tokens == 0
    assert all(r.arrival_s >= leader.token_times_s[0] for r in followers)
    assert all((r.cached_tokens or 0) > 0 for r in followers)


async def test_a_failed_leader_releases_the_sessions_parked_behind_it() -> None:
    """The leader fails before any token (a 503): the parked sessions are not stuck. The
    prefix never got cached, so one of them leads anew and the others follow its first
    token (they all went at once, as if it were warm)."""
    sched = scheduler(warmup=True)
    acq = Acquirer(sched)
    acq.submit(ticket("leader", prefix_key="p"))
    for i in range(3):
        acq.submit(ticket(f"f{i}", prefix_key="p"))
    acq.submit(ticket("other", prefix_key="q"))
    await settle()
    assert acq.order == ["leader", "other"] and sched.waiting == 3
    assert acq.grants["leader"].leader and acq.grants["other"].leader
    acq.release("leader", ok=False)
    await settle()
    assert acq.order[2:] == ["f0"] and acq.grants["f0"].leader and sched.waiting == 2
    sched.warmed("p", acq.grants["f0"].replica)
    await settle()
    assert sorted(acq.order[3:]) == ["f1", "f2"] and sched.waiting == 0
    assert not any(acq.grants[f"f{i}"].leader for i in (1, 2))
    for sid in ("other", "f0", "f1", "f2"):
        acq.release(sid)
    await sched.aclose()


def test_aclose_cancels_queued_and_parked_tickets() -> None:
    async def main() -> None:
        sched = scheduler(warmup=True, max_in_flight=2)
        acq = Acquirer(sched)
        acq.submit(ticket("leader", prefix_key="p"))
        parked = [acq.submit(ticket(f"p{i}", prefix_key="p")) for i in range(2)]
        acq.submit(ticket("x"))
        queued = acq.submit(ticket("y"))
        await settle()
        assert acq.order == ["leader", "x"] and sched.waiting == 3
        await sched.aclose()
        done, pending = await asyncio.wait([*parked, queued], timeout=10.0)
        assert not pending and all(t.cancelled() for t in done)
        assert sched.waiting == 0

    run_virtual(main())


def test_aclose_cancels_the_ticket_the_dispatcher_waits_on_a_bucket_for() -> None:
    """One request a minute: ``s2`` is popped and waits on the bucket (in no queue),
    ``s3`` is queued behind it. aclose cancels both, the first included, and leaves no
    slot held."""

    async def main() -> None:
        sched = scheduler(rpm=1.0)
        first = await sched.acquire(ticket("s1"))
        head = asyncio.create_task(sched.acquire(ticket("s2")))
        queued = asyncio.create_task(sched.acquire(ticket("s3")))
        await asyncio.sleep(1.0)
        assert sched.in_flight == 1 and sched.claimed == 2  # s2 keeps its slot, waiting ...
        assert sched.waiting == 2  # ... on the bucket, and s3 in the queue
        await sched.aclose()
        _, pending = await asyncio.wait({head, queued}, timeout=3600.0)
        assert not pending and head.cancelled() and queued.cancelled()
        sched.release(first, used_tokens=None, ok=True)
        assert sched.claimed == 0 and sched.waiting == 0

    run_virtual(main())


class _BrokenBucket(RateGate):
    """A fleet bucket that fails after a while: a bug in the dispatcher's wait."""

    def ready(self, tokens: int) -> bool:
        return False  # every ticket goes through the dispatcher

    async def take(self, tokens: int) -> None:
        await asyncio.sleep(1.0)
        raise RuntimeError("bucket broke")


def test_a_dispatcher_that_dies_in_a_bucket_wait_fails_that_ticket_too() -> None:
    """The dispatcher crashes while it waits on a bucket for ``s1`` (popped, in no
    queue): ``s1`` fails with the crash, as the queued ``s2`` does, instead of hanging."""

    async def main() -> None:
        sched = scheduler()
        sched._rates = _BrokenBucket(None, None, 1.0)
        head = asyncio.create_task(sched.acquire(ticket("s1")))
        queued = asyncio.create_task(sched.acquire(ticket("s2")))
        _, pending = await asyncio.wait({head, queued}, timeout=3600.0)
        assert not pending
        for task in (head, queued):
            with pytest.raises(RuntimeError, match=r"dispatcher failed.*bucket broke"):
                task.result()
        assert sched.in_flight == 0
        await sched.aclose()

    run_virtual(main())


# --- Breakers and the dispatcher ----------------------------------------------------------


class CountingRouter(Router):
    """A router that counts how often the dispatcher asks it for a replica."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def choose(self, ticket: Ticket, replicas: list[ReplicaState]) -> ReplicaState | None:
        self.calls += 1
        return super().choose(ticket, replicas)


def _breaker_scheduler(router: Router) -> Scheduler:
    """Two replicas: ``flaky`` (its breaker opens at one failure, for 1 s) and ``busy``
    (room for one request). The breaker of the last closed replica never opens, so a
    lone replica cannot show an open breaker holding turns back; with ``busy`` full,
    turns can only go to ``flaky``."""
    flaky = Replica(
        transport=IdleTransport("idle://flaky"),
        name="flaky",
        breaker_threshold=1,
        breaker_cooldown_s=1.0,
    )
    busy = Replica(
        transport=IdleTransport("idle://busy"), name="busy", limits=Limits(max_in_flight=1)
    )
    return Scheduler([flaky, busy], router=router, clock=loop_clock, prefix_warmup=False)


async def _open_flaky(acq: Acquirer) -> None:
    """Fill ``busy`` with a long stream (``hog``) and open ``flaky``'s breaker."""
    acq.submit(ticket("a"))
    await settle()
    acq.submit(ticket("hog"))
    await settle()
    assert acq.grants["a"].replica.name == "flaky" and acq.grants["hog"].replica.name == "busy"
    acq.release("a", ok=False)  # threshold 1: the breaker opens for 1 s


def test_an_open_breaker_delays_dispatch_until_the_probe_then_sleeps() -> None:
    """The only replica with room has its breaker open (the other is full): the next turn
    waits for the cooldown — the dispatcher wakes for it, though no release comes — and
    goes as the probe; while the probe is out the others wait without the dispatcher
    spinning; the probe's success closes the breaker and they go."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        router = CountingRouter()
        sched = _breaker_scheduler(router)
        acq = Acquirer(sched)
        await _open_flaky(acq)
        breaker = sched.replicas[0].breaker
        assert state(breaker) == "open"
        acq.submit(ticket("probe"))
        await asyncio.sleep(0.5)
        assert acq.order == ["a", "hog"]
        await asyncio.sleep(0.6)
        assert acq.order == ["a", "hog", "probe"] and state(breaker) == "half_open"
        assert 1.0 <= acq.grants["probe"].started_ns / _NS <= 1.0 + 1e-3
        for i in range(3):
            acq.submit(ticket(f"w{i}"))
        calls = router.calls
        await asyncio.sleep(0.05)  # the probe streams for 50 ms
        assert acq.order == ["a", "hog", "probe"]
        assert router.calls - calls < 10, "the dispatcher spins while the probe is out"
        acq.release("probe", ok=True)
        await settle()
        assert state(breaker) == "closed" and acq.order[3:] == ["w0", "w1", "w2"]
        assert loop.time() < 1.2
        for i in range(3):
            acq.release(f"w{i}")
        acq.release("hog")
        await sched.aclose()

    run_virtual(main())


def test_a_cancelled_probe_lets_another_probe_go() -> None:
    """The probe's session is cancelled (no verdict on the replica): the breaker must let
    another request probe, or turns that can only go to that replica would wait forever."""

    async def main() -> None:
        sched = _breaker_scheduler(Router())
        acq = Acquirer(sched)
        await _open_flaky(acq)
        acq.submit(ticket("probe"))
        await asyncio.sleep(1.01)
        assert acq.order == ["a", "hog", "probe"]
        acq.submit(ticket("next"))
        await settle()
        assert acq.order == ["a", "hog", "probe"]  # one probe at a time
        acq.release("probe", ok=None)  # cancelled mid-stream
        await settle()
        assert acq.order == ["a", "hog", "probe", "next"]
        acq.release("next", ok=True)
        assert state(sched.replicas[0].breaker) == "closed"
        acq.release("hog")
        await sched.aclose()

    run_virtual(main())


async def test_repr_and_waiting() -> None:
    sched = scheduler(max_in_flight=1)
    acq = Acquirer(sched)
    acq.submit(ticket("a"))
    acq.submit(ticket("b"))
    await settle()
    assert "in_flight=1" in repr(sched) and "waiting=1" in repr(sched)
    assert "in_flight=1" in repr(sched.replicas[0]) and "closed" in repr(sched.replicas[0])
    acq.release("a")
    await settle()
    acq.release("b")
    await sched.aclose()
