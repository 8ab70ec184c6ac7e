"""The circuit breaker judges a failure *rate* over its last outcomes, and the breaker of
the last closed replica never opens.

Unit tests drive a :class:`CircuitBreaker` on a :class:`FakeClock`; the scheduler tests
use a real :class:`Scheduler` on hand-made replicas; the fleet test runs real HTTP
against the simulator's seeded faults on the virtual clock and compares the same fleet
with and without a breaker.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow import (
    Agent,
    AllReplicasDown,
    ConfigError,
    ConnectError,
    Fleet,
    FleetResult,
    HTTPTransport,
    Replica,
    RetryPolicy,
    ServerError,
    Timeouts,
    TransportError,
)
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import CircuitBreaker, Scheduler
from agentflow.sim.faults import FAULT_KINDS, FaultConfig
from tests.sched.conftest import (
    Acquirer,
    FakeClock,
    IdleTransport,
    RecordingSim,
    settle,
    state,
    ticket,
)


def failing(b: CircuitBreaker) -> bool:
    """The breaker's verdict, read fresh (a property that changes with every outcome)."""
    return b.failing


def outcomes(b: CircuitBreaker, pattern: str, *, may_open: bool = True) -> None:
    """Feed ``pattern`` to ``b``: ``F`` a failure, ``S`` a success (each one request)."""
    for ch in pattern:
        probe = b.on_send()
        if ch == "F":
            b.on_failure(probe, may_open=may_open)
        else:
            b.on_success(probe)


def test_fast_failures_among_slow_successes_do_not_open_it() -> None:
    """The issue's case: under a fault rate, failures come in runs (a 503 is back in
    milliseconds, successes stream for seconds) — five in a row opened the old breaker.
    Judged as a share of the last 20 outcomes, successes included, they do not."""
    b = CircuitBreaker(FakeClock(), threshold=5, failure_rate=0.5, window=20)
    outcomes(b, "S" * 14 + "F" * 6)  # six fast failures in a row: 6 of 20
    assert state(b) == "closed" and not failing(b) and b.failures == 6
    c = CircuitBreaker(FakeClock(), threshold=5, failure_rate=0.5, window=20)
    for _ in range(30):  # 30% fail, in runs of three
        outcomes(c, "FFFSSSSSSS")
    assert state(c) == "closed" and c.opened == 0 and not failing(c) and c.failures == 6


def test_it_opens_when_failures_reach_the_rate_in_the_window() -> None:
    """20 successes, then failures: each success stays in the window until 20 newer
    outcomes push it out, so the 10th failure (10 of 20) opens it, not the 5th."""
    b = CircuitBreaker(FakeClock(), threshold=5, failure_rate=0.5, window=20)
    outcomes(b, "S" * 20 + "F" * 9)
    assert state(b) == "closed" and b.failures == 9 and not failing(b)
    outcomes(b, "F")
    assert state(b) == "open" and b.opened == 1 and failing(b)


def test_a_success_after_failures_is_counted_and_the_threshold_comes_first() -> None:
    """Fewer than ``threshold`` failures never open it, even at 100%; a success that
    ends after a run of failures counts in the window and holds the rate down."""
    b = CircuitBreaker(FakeClock(), threshold=5, failure_rate=0.5, window=20)
    outcomes(b, "FFFF")
    assert state(b) == "closed" and b.failures == 4  # 100%, but under the threshold
    outcomes(b, "SSSSS")  # the slow successes sent with them end now
    outcomes(b, "F")  # 5 of 10: at the rate
    assert state(b) == "open"

    c = CircuitBreaker(FakeClock(), threshold=5, failure_rate=0.5, window=20)
    outcomes(c, "FFFF" + "SSSSS")
    outcomes(c, "S")
    outcomes(c, "F")  # 5 of 11: under the rate
    assert state(c) == "closed" and c.failures == 5


def test_failures_that_leave_the_window_no_longer_count() -> None:
    b = CircuitBreaker(FakeClock(), threshold=5, failure_rate=0.5, window=10)
    outcomes(b, "FFFF" + "S" * 10)  # the four failures have left the window
    assert b.failures == 0
    outcomes(b, "FFFF")
    assert state(b) == "closed" and b.failures == 4


def test_the_rate_is_compared_without_float_error() -> None:
    """0.3 × 10 is 3.0000000000000004 in floating point: 3 failures of 10 must open it."""
    b = CircuitBreaker(FakeClock(), threshold=3, failure_rate=0.3, window=10)
    outcomes(b, "SSSSSSSFFF")
    assert state(b) == "open"


def test_a_held_breaker_stays_closed_and_says_it_is_failing() -> None:
    """``may_open=False`` (the last closed replica) keeps it closed — it lets every
    request through — but it reports ``failing`` and counts each hold; once another
    replica can take the traffic, the next failure opens it."""
    clock = FakeClock()
    b = CircuitBreaker(clock, threshold=3, cooldown_s=5.0)
    outcomes(b, "FFFFF", may_open=False)
    assert state(b) == "closed" and b.allows() and failing(b)
    assert b.held == 3 and b.opened == 0  # the 3rd, 4th and 5th failure
    outcomes(b, "F")
    assert state(b) == "open" and b.opened == 1 and b.opens_in_ns() == 5_000_000_000
    clock.advance(5.0)
    assert failing(b) and state(b) == "half_open"
    outcomes(b, "S")  # the probe closes it and forgets the window
    assert state(b) == "closed" and not failing(b) and b.failures == 0


def test_a_probe_failure_reopens_even_when_held_closed_would_apply() -> None:
    """``may_open`` guards the closed → open step only: a half-open replica is not one the
    router can rely on, so its failed probe re-opens it (cooldown doubled)."""
    clock = FakeClock()
    b = CircuitBreaker(clock, threshold=1, cooldown_s=1.0, max_cooldown_s=4.0)
    outcomes(b, "F")
    clock.advance(1.0)
    outcomes(b, "F", may_open=False)
    assert state(b) == "open" and b.opened == 2 and b.opens_in_ns() == 2_000_000_000


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"failure_rate": 0.0}, "failure_rate"),
        ({"failure_rate": 1.5}, "failure_rate"),
        ({"failure_rate": True}, "failure_rate"),
        ({"window": 0}, "window"),
        ({"window": 2.5}, "window"),
        ({"threshold": 0}, "threshold"),
    ],
)
def test_bad_breaker_settings_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        CircuitBreaker(FakeClock(), **kwargs)  # type: ignore[arg-type]


def test_the_window_is_at_least_the_threshold() -> None:
    b = CircuitBreaker(FakeClock(), threshold=8, window=4)
    assert b.window == 8
    outcomes(b, "F" * 8)
    assert state(b) == "open"


# --- The scheduler: the last closed breaker never opens ------------------------------------


def _replicas(*names: str, threshold: int = 2) -> Scheduler:
    return Scheduler(
        [
            Replica(transport=IdleTransport(f"idle://{n}"), name=n, breaker_threshold=threshold)
            for n in names
        ],
        clock=FakeClock(),
        prefix_warmup=False,
    )


async def _fail(acq: Acquirer, name: str, times: int, error: TransportError) -> list[str]:
    """Acquire and fail ``times`` tickets; the replicas they went to, in order."""
    went: list[str] = []
    for i in range(times):
        sid = f"{name}{i}"
        acq.submit(ticket(sid))
        await settle()
        went.append(acq.grants[sid].replica.name)
        acq.scheduler.release(acq.grants.pop(sid), used_tokens=None, ok=False, error=error)
    return went


async def test_a_lone_replicas_breaker_never_opens() -> None:
    """100 failures in a row on the only replica: its breaker judges it failing but
    never opens, so every turn is dispatched at once; the fleet is all down."""
    sched = _replicas("only")
    acq = Acquirer(sched)
    err = ConnectError("connection refused", endpoint="http://only/v1")
    went = await _fail(acq, "t", 100, err)
    assert went == ["only"] * 100
    (only,) = sched.replicas
    assert state(only.breaker) == "closed" and only.breaker.opened == 0
    assert only.breaker.held == 99 and only.breaker.failing
    assert sched.all_down() and only.last_error is err
    await sched.aclose()


async def test_of_three_failing_replicas_two_open_and_the_last_is_held() -> None:
    """Every replica fails (threshold 2; turns spread least-loaded): ``a`` and ``b``
    trip and open; ``c``, the last closed one, is held closed and takes every turn.
    Then ``a``'s probe succeeds and closes it — and ``c``'s next failure opens ``c``."""
    sched = _replicas("a", "b", "c")
    acq = Acquirer(sched)
    boom = ServerError("boom", status=500, endpoint="http://x/v1")
    went = await _fail(acq, "t", 12, boom)
    a, b, c = sched.replicas
    assert went == ["a", "b", "c", "a", "b"] + ["c"] * 7
    assert [state(r.breaker) for r in (a, b, c)] == ["open", "open", "closed"]
    assert c.breaker.failing and c.breaker.held == 7 and c.breaker.opened == 0
    assert sched.all_down()
    err = sched.down_error()
    assert isinstance(err, AllReplicasDown) and list(err.replicas) == ["a", "b", "c"]
    assert all(e is boom for e in err.replicas.values())
    assert str(err).startswith("all 3 replicas down: 'a' (ServerError: boom); 'b' (")

    clock = sched.clock
    assert isinstance(clock, FakeClock)
    clock.advance(5.0)  # the cooldown: a and b are half-open
    acq.submit(ticket("probe"))
    await settle()
    assert acq.grants["probe"].replica is a and acq.grants["probe"].probe
    acq.release("probe", ok=True)
    assert state(a.breaker) == "closed" and not sched.all_down()
    acq.submit(ticket("t2"))  # session t2 is at home on c
    await settle()
    assert acq.grants["t2"].replica is c
    acq.release("t2", ok=False)
    assert state(c.breaker) == "open" and c.breaker.opened == 1
    await sched.aclose()


async def test_the_down_error_carries_no_url_credentials() -> None:
    secret = "http://alice:s3cret@gpu-1:8000/v1"
    sched = Scheduler(
        [Replica(transport=IdleTransport(secret), breaker_threshold=1)],
        clock=FakeClock(),
        prefix_warmup=False,
    )
    acq = Acquirer(sched)
    await _fail(acq, "t", 1, ConnectError(f"cannot connect to {secret}", endpoint=secret))
    err = sched.down_error(secret)
    assert "s3cret" not in str(err) and "alice" not in str(err)
    assert "http://gpu-1:8000/v1" in str(err)
    assert list(err.replicas) == ["http://gpu-1:8000/v1"] and err.endpoint == "http://gpu-1:8000/v1"
    await sched.aclose()


# --- A lone replica under heavy faults: the breaker costs nothing -------------------------

SESSIONS = 60
AGENT = Agent(name="worker", model="m", instructions="Answer.", params={"max_tokens": 24})


def _faults(total: float) -> FaultConfig:
    """Every fault kind the simulator can inject, sharing ``total`` equally."""
    rates: dict[str, Any] = {kind: total / len(FAULT_KINDS) for kind in FAULT_KINDS}
    return FaultConfig(
        **rates,
        retry_after_s=0.5,
        stall_s=5.0,
        seed=7,
    )


def _run(breaker: bool) -> tuple[FleetResult, int, float]:
    """The same fleet against a fresh simulator at 35% faults; returns the result, the
    requests the server answered, and the virtual time the run took."""

    async def main() -> tuple[FleetResult, int, float]:
        async with (
            RecordingSim(faults=_faults(0.35)) as sim,
            HTTPTransport(sim.base_url, timeouts=Timeouts(idle=1.0), clock=loop_clock) as http,
        ):
            # "No breaker": a threshold no run reaches.
            replica = Replica(transport=http, breaker_threshold=5 if breaker else 10**6)
            policy = RetryPolicy(max_attempts=12, retry_protocol_errors=True, jitter=False)
            fleet = Fleet(replica, retry=policy, clock=loop_clock, max_concurrency=16)
            loop = asyncio.get_running_loop()
            start = loop.time()
            result = await fleet.run(AGENT.session(f"task {i}") for i in range(SESSIONS))
            return result, len(sim.seen), loop.time() - start

    return run_virtual(main())


def test_a_lone_replica_under_heavy_faults_is_no_slower_with_the_breaker() -> None:
    """35% faults of every kind, one replica, 16 requests in flight, over real HTTP on
    the virtual clock. The breaker judges the replica failing at times but is held
    closed (opening it would queue every turn behind one probe), so the fleet sends the
    same requests and ends no later than with no breaker."""
    with_b, seen_b, took_b = _run(breaker=True)
    without, seen_n, took_n = _run(breaker=False)
    assert not with_b.failed and not without.failed, [s.error for s in with_b.failed]
    (rb,) = with_b.replicas
    assert rb.breaker_opened == 0 and rb.breaker_held >= 1
    assert rb.failures > 0 and with_b.retries > 0  # the faults were there
    # The fault draws depend only on each request's body and how often it was seen, so
    # the same requests mean the same faults: attempt for attempt, the same run.
    assert seen_b == seen_n and with_b.retries == without.retries
    assert took_b <= took_n * 1.05 + 0.5
