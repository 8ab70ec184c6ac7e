"""Which clock a fleet's carried limits judge the time between its runs by.

Buckets read the running loop's ``time()``; a ``Retry-After`` hold reads the fleet's
clock. uvloop's ``time()`` is the monotonic clock asyncio's reads, so a bucket drains
for the gap between two runs on new uvloop loops as it does on asyncio's; and a hold
on a fleet clock that is not a loop's (the default ``time.perf_counter_ns``) goes on
across loops — even virtual ones, which restart near 0 — rather than being moved to
the new loop's start with the time it had left.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, Fleet, Replica
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import _limits
from agentflow.sched._carry import Carry
from agentflow.sched._limits import _bucket, clock_of
from agentflow.sched._replica import ReplicaState
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest
from agentflow.typing import Clock
from tests.sched.conftest import FakeClock

_AGENT = Agent(name="x", model="m", params={"max_tokens": 40})


def test_uvloop_reads_the_clock_asyncio_reads() -> None:
    """uvloop's ``time()`` is ``CLOCK_MONOTONIC``: the same clock as asyncio's loop."""
    uvloop = pytest.importorskip("uvloop")

    async def which() -> object:
        return clock_of(asyncio.get_running_loop())

    assert uvloop.run(which()) == asyncio.run(which())


def test_a_bucket_drains_for_the_gap_between_runs_on_new_uvloop_loops() -> None:
    """A bucket of one (``rpm=60``) filled on one uvloop loop, its last reading 2 s
    back, is empty on the next uvloop loop: the gap counts (it used to count for
    nothing, a uvloop loop taken for a clock of its own, so the run waited 1 s)."""
    uvloop = pytest.importorskip("uvloop")
    bucket = _bucket(60.0, 1.0, 1.0)

    async def fill() -> None:
        bucket.force(1)
        bucket._last_check -= 2.0  # 2 s between this run's last reading and the next run

    async def wait() -> float:
        return bucket.wait_s(1)

    uvloop.run(fill())
    assert uvloop.run(wait()) == 0.0


def _two_replicas(clock: Clock) -> tuple[Fleet, dict[str, int]]:
    """Replicas ``a`` and ``b`` in process; ``a`` answers its first request with 429
    ``Retry-After: 1``."""
    hits = {"a": 0, "b": 0}

    def on(name: str) -> MockTransport:
        def handler(request: ChatRequest) -> Reply:
            hits[name] += 1
            if name == "a" and hits["a"] == 1:
                return Reply.error(429, headers={"Retry-After": "1"})
            return Reply.text("ok")

        return MockTransport(handler, endpoint=f"mock://{name}")

    replicas = [Replica(transport=on(n), name=n) for n in "ab"]
    return Fleet(replicas, clock=clock, prefix_warmup=False), hits


def test_a_hold_on_a_fleet_clock_of_its_own_ends_on_it_across_virtual_loops() -> None:
    """The fleet's clock is not the loop's (as the default ``perf_counter_ns`` is not a
    virtual loop's): ``a``'s 1 s hold from run 1 is over 2 s later on that clock, and
    run 2, on a new virtual loop, uses ``a``. (The hold used to be moved to the new
    loop's start with the time it had left, revived for a second.)"""
    clock = FakeClock(1000.0)
    fleet, hits = _two_replicas(clock)

    async def run(tag: str, n: int) -> None:
        sessions = [_AGENT.session(f"{tag} q{i}") for i in range(n)]
        assert not (await fleet.run(sessions)).failed

    run_virtual(run("run 1", 1))
    assert hits["a"] == 1
    clock.advance(2.0)
    run_virtual(run("run 2", 4))
    assert fleet._carry._replicas["a"].hold.until_ns == 0
    assert hits["a"] > 1, hits


def test_a_hold_keeps_the_time_it_had_left_at_the_runs_end_on_a_new_virtual_loop() -> None:
    """On ``loop_clock``: ``a`` answers 429 ``Retry-After: 30`` at 0 s; the retry goes to
    ``b``, which takes 25 s, and run 1 ends then, 5 s of the hold left. On a new virtual
    loop, run 2 avoids ``a`` and run 3, 5.5 s in, uses it (the hold kept the 30 s it had
    left when last read, at 0 s, and ``a`` was avoided until 30 s of the new loop)."""
    hits: dict[str, list[float]] = {"a": [], "b": []}

    def on(name: str) -> MockTransport:
        async def handler(request: ChatRequest) -> Reply:
            hits[name].append(asyncio.get_running_loop().time())
            if name == "a" and len(hits["a"]) == 1:
                return Reply.error(429, headers={"Retry-After": "30"})
            if name == "b" and len(hits["b"]) == 1:
                await asyncio.sleep(25.0)
            return Reply.text("ok")

        return MockTransport(handler, clock=loop_clock, endpoint=f"mock://{name}")

    replicas = [Replica(transport=on(n), name=n) for n in "ab"]
    fleet = Fleet(replicas, clock=loop_clock, prefix_warmup=False)

    async def run(tag: str, n: int) -> None:
        sessions = [_AGENT.session(f"{tag} q{i}") for i in range(n)]
        assert not (await fleet.run(sessions)).failed

    async def first() -> float:
        await run("run 1", 1)
        return asyncio.get_running_loop().time()

    async def second() -> tuple[int, int]:
        await run("run 2", 4)
        held = len(hits["a"])
        await asyncio.sleep(5.5)
        await run("run 3", 4)
        return held, len(hits["a"])

    assert 25.0 <= run_virtual(first()) < 26.0  # (the retry's backoff first)
    assert len(hits["a"]) == 1
    held, after = run_virtual(second())
    assert held == 1 and after > 1, hits


def test_a_bucket_works_out_a_loops_clock_once_per_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which clock a loop reads is worked out when a bucket first leaks on it, not at
    every leak (a turn leaks ~10 times under fleet and replica ``rpm``/``tpm``; each
    used to ask, doubling the leak's cost); a new loop is asked about again."""
    asked: list[object] = []

    def counted(loop: asyncio.AbstractEventLoop) -> object:
        asked.append(loop)
        return clock_of(loop)

    monkeypatch.setattr(_limits, "clock_of", counted)
    bucket = _bucket(6000.0, 1.0, 1.0)

    async def leaks() -> None:
        for _ in range(100):
            bucket.force(1)
            bucket.wait_s(1)

    run_virtual(leaks())
    assert len(asked) == 1
    run_virtual(leaks())
    assert len(asked) == 2 and asked[0] is not asked[1]


def test_a_hold_is_set_by_extend_only_and_keeps_its_time_left_on_rebase() -> None:
    """``held_until_ns`` is read-only: setting it left the hold's last reading at 0, and
    a rebase then kept (clock − 0) + 10 s of it — hours, not the 10 s set. A hold set
    with ``extend`` keeps its 10 s."""
    clock = FakeClock(3600.0)
    state = ReplicaState(
        Replica(transport=MockTransport(lambda r: Reply.text("ok")), name="a"), clock, Carry()
    )
    with pytest.raises(AttributeError):
        state.held_until_ns = clock() + 10 * 10**9  # type: ignore[misc]
    state.hold.extend(clock(), 10.0)
    state.hold.rebase(clock())
    assert state.held_ns() == 10 * 10**9
