"""Retries against the simulator's fault injection, over real HTTP.

A :class:`Faulty` transport adds the ``X-Agentflow-Fault`` header to chosen attempts of
every turn; the simulator answers with that fault. Waits go through an injected
``sleep`` that records them and returns at once, so ``Retry-After`` and backoff are
checked exactly and nothing waits on the wall clock; tests that need time to pass (the
idle limit that detects a stall, a breaker's cooldown) run real HTTP on the virtual
clock (:func:`~agentflow.embedded.run_virtual`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from tenacity import RetryCallState

from agentflow import (
    Agent,
    BadRequestError,
    ContextOverflow,
    Event,
    Fleet,
    FleetResult,
    HTTPTransport,
    PromptInfo,
    RateLimitError,
    Replica,
    RetryEvent,
    RetryPolicy,
    ServerError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
    Timeouts,
    ToolError,
    TransportError,
    TurnEndEvent,
    TurnTrace,
)
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import CircuitBreaker
from agentflow.sim.faults import FAULT_HEADER
from agentflow.testing import Reply, ScriptedServer
from agentflow.typing import Complete, Transport
from tests.sched.conftest import FakeClock, Faulty, RecordingSim, state

SESSIONS = 12


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def broken(key: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"cannot look up {key}")


#: Two turns a session: a tool call, then the answer (the simulator's tool_rounds=1).
AGENT = Agent(
    name="looker",
    model="m",
    instructions="Use the tool.",
    tools=[lookup],
    params={"max_tokens": 32},
)

#: Exact waits: no jitter; first backoff 0.25 s, then 0.5 s, ...
POLICY = RetryPolicy(backoff_s=0.25, jitter=False)


class Waits:
    """An injected ``sleep``: records every wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


async def run(
    transport: Transport,
    policy: RetryPolicy | None = POLICY,
    *,
    agent: Agent = AGENT,
    sessions: int = SESSIONS,
    breaker_threshold: int = 1000,
) -> tuple[FleetResult, list[Event], Waits]:
    """Run ``sessions`` sessions; the replica's breaker is out of the way (a threshold no
    test reaches) unless ``breaker_threshold`` says otherwise."""
    events: list[Event] = []
    waits = Waits()
    replica = Replica(transport=transport, breaker_threshold=breaker_threshold)
    fleet = Fleet(replica, retry=policy, sleep=waits, callbacks=[events.append])
    result = await fleet.run(agent.session(f"task {i}") for i in range(sessions))
    return result, events, waits


def assert_accounted(result: FleetResult, events: list[Event], server_requests: int) -> None:
    """Every request the server saw is a finished turn or a recorded failed attempt —
    once; each failed attempt was announced by one RetryEvent."""
    turns = [t for s in result.sessions for t in s.turns]
    failed = [f for t in turns for f in t.failed_attempts]
    retries = [e for e in events if isinstance(e, RetryEvent)]
    ends = [e for e in events if isinstance(e, TurnEndEvent)]
    assert server_requests == len(turns) + len(failed)
    assert len(retries) == len(failed) == result.retries
    assert {id(e.attempt) for e in retries} == {id(f) for f in failed}
    assert len(ends) == len(turns)


# (fault header, the error it becomes, output arrived before it, the wait before the retry)
CASES: list[tuple[str, type[TransportError], bool, float]] = [
    ("rate_limit; retry_after=7", RateLimitError, False, 7.0),
    ("server_error", ServerError, False, 0.25),
    ("unavailable; retry_after=3", ServerError, False, 3.0),
    ("reset_mid_stream; after=2", StreamInterrupted, True, 0.25),
    # StreamTimeout keeps what arrived before the stall.
    ("stall_mid_stream; after=2; seconds=30", StreamTimeout, True, 0.25),
]


@pytest.mark.parametrize(("fault", "error", "partial", "wait"), CASES)
def test_every_retried_fault_kind(
    fault: str, error: type[TransportError], partial: bool, wait: float
) -> None:
    """The first attempt of every turn gets the fault; the retry succeeds; the failed
    attempt is on the turn, announced once, and waited for as the server asked.

    Real HTTP on the virtual clock: the idle limit that detects the stall (1 s) and the
    stall itself (30 s) are exact, and take no wall time."""

    async def main() -> tuple[FleetResult, list[Event], Waits, RecordingSim]:
        async with (
            RecordingSim() as sim,
            HTTPTransport(sim.base_url, timeouts=Timeouts(idle=1.0), clock=loop_clock) as http,
        ):
            return (*await run(Faulty(http, fault)), sim)

    result, events, waits, sim = run_virtual(main())
    assert not result.failed, [s.error for s in result.failed]
    turns = [t for s in result.sessions for t in s.turns]
    assert len(turns) == 2 * SESSIONS
    for turn in turns:
        (failed,) = turn.failed_attempts
        assert isinstance(failed.error, error) and failed.attempt == 0
        assert failed.wait_s == wait
        if partial:  # the discarded output is kept on the turn, not in the conversation
            assert failed.trace is not None and failed.trace.chunk_ns
        else:
            assert failed.trace is None
    assert waits.waits == [wait] * len(turns)
    assert_accounted(result, events, len(sim.seen))
    assert len(sim.seen) == 4 * SESSIONS
    # The conversation holds only the attempts that succeeded.
    for s in result.sessions:
        roles = ["system", "user", "assistant", "tool", "assistant"]
        assert [m["role"] for m in s.messages] == roles


@pytest.mark.parametrize("fault", ["malformed_chunk; after=2"])
async def test_protocol_errors_are_retried_only_when_asked(fault: str) -> None:
    """A malformed chunk is a StreamProtocolError: not retried by default; retried with
    ``retry_protocol_errors=True``."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, events, waits = await run(Faulty(http, fault))
        assert len(result.failed) == SESSIONS
        for s in result.failed:
            assert isinstance(s.error, StreamProtocolError) and not s.turns
        assert len(sim.seen) == SESSIONS and not waits.waits
        assert not any(isinstance(e, RetryEvent) for e in events)

        sim.seen.clear()
        opt_in = RetryPolicy(backoff_s=0.25, jitter=False, retry_protocol_errors=True)
        result, events, waits = await run(Faulty(http, fault), opt_in)
    assert not result.failed
    failed = [f for s in result.sessions for t in s.turns for f in t.failed_attempts]
    assert len(failed) == 2 * SESSIONS
    assert all(isinstance(f.error, StreamProtocolError) and f.trace is not None for f in failed)
    assert all(f.trace is not None and f.trace.chunk_ns for f in failed)
    assert_accounted(result, events, len(sim.seen))


async def test_a_stream_that_ends_early_is_rerun_by_default() -> None:
    """A body that ends with neither a finish reason nor [DONE] (the simulator's
    cut_stream) is an unfinished StreamProtocolError: a mid-stream cut, re-run by default
    with its partial output recorded; not re-run with ``retry_mid_stream=False``."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        policy = RetryPolicy(backoff_s=0.25, jitter=False)
        result, events, _ = await run(Faulty(http, "cut_stream; after=2"), policy)
        assert not result.failed
        failed = [f for s in result.sessions for t in s.turns for f in t.failed_attempts]
        assert len(failed) == 2 * SESSIONS
        assert all(isinstance(f.error, StreamProtocolError) and f.error.unfinished for f in failed)
        assert all(f.trace is not None and f.trace.chunk_ns for f in failed)
        assert_accounted(result, events, len(sim.seen))

        off = RetryPolicy(backoff_s=0.25, jitter=False, retry_mid_stream=False)
        result, events, waits = await run(Faulty(http, "cut_stream; after=2"), off)
        assert len(result.failed) == SESSIONS and not waits.waits
        assert not any(isinstance(e, RetryEvent) for e in events)


async def test_retry_after_is_capped() -> None:
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        policy = RetryPolicy(max_retry_after_s=2.0, jitter=False)
        result, _, waits = await run(
            Faulty(http, "rate_limit; retry_after=120"), policy, sessions=2
        )
    assert not result.failed
    assert waits.waits == [2.0] * 4


async def test_exhausted_attempts_end_the_session_with_the_last_error() -> None:
    """max_attempts=3 and three faults in a row: three requests, two waits (backoff
    0.25 s then 0.5 s), two RetryEvents, and the session ends with the third error."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        faults = Faulty(http, "server_error", "unavailable; retry_after=0", "rate_limit")
        policy = RetryPolicy(max_attempts=3, backoff_s=0.25, jitter=False)
        result, events, waits = await run(faults, policy, sessions=1)
    (session,) = result.sessions
    assert session.status == "error" and not session.turns
    assert isinstance(session.error, RateLimitError) and session.error.status == 429
    assert len(sim.seen) == 3 and [s.status for s in sim.seen] == [500, 503, 429]
    assert waits.waits == [0.25, 0.0]
    retries = [e for e in events if isinstance(e, RetryEvent)]
    assert [type(e.attempt.error) for e in retries] == [ServerError, ServerError]
    assert [e.attempt.attempt for e in retries] == [0, 1] and result.retries == 2


async def test_backoff_grows_exponentially_and_is_capped() -> None:
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        faults = Faulty(http, *["server_error"] * 4)
        policy = RetryPolicy(max_attempts=5, backoff_s=0.25, max_backoff_s=1.0, jitter=False)
        result, _, waits = await run(faults, policy, sessions=1)
    assert not result.failed and len(sim.seen) == 2 * 5  # each turn: 4 failures, 1 success
    assert waits.waits == [0.25, 0.5, 1.0, 1.0] * 2


async def test_jittered_backoff_stays_under_its_exponential_bound() -> None:
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        faults = Faulty(http, *["server_error"] * 3)
        policy = RetryPolicy(max_attempts=4, backoff_s=0.25)
        result, _, waits = await run(faults, policy, sessions=4)
    assert not result.failed and len(waits.waits) == 4 * 2 * 3
    failed = [f for s in result.sessions for t in s.turns for f in t.failed_attempts]
    assert sorted(f.wait_s for f in failed) == sorted(waits.waits)
    assert all(0 <= f.wait_s <= 0.25 * 2**f.attempt for f in failed)
    assert len({f.wait_s for f in failed}) > 1  # jittered


# --- Never retried ------------------------------------------------------------------------


async def test_an_invalid_request_is_not_retried() -> None:
    """The simulator rejects the body (seed must be an integer): one 400, no retry."""
    bad = Agent(name="bad", model="m", params={"seed": "not a number"})
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, events, waits = await run(http, agent=bad, sessions=3)
    assert len(result.failed) == 3 and len(sim.seen) == 3
    for s in result.failed:
        assert isinstance(s.error, BadRequestError) and s.error.status == 400
        assert "seed" in str(s.error)
    assert not waits.waits and not any(isinstance(e, RetryEvent) for e in events)


async def test_an_unknown_fault_header_is_a_400() -> None:
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, _, waits = await run(Faulty(http, "bogus"), sessions=1)
    (session,) = result.sessions
    assert isinstance(session.error, BadRequestError) and FAULT_HEADER in str(session.error)
    assert len(sim.seen) == 1 and not waits.waits


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_are_not_retried(status: int) -> None:
    async with (
        ScriptedServer([Reply.error(status, "no")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result, _, waits = await run(http, agent=Agent(name="p", model="m"), sessions=1)
    srv.assert_complete()
    (session,) = result.sessions
    assert isinstance(session.error, BadRequestError) and session.error.status == status
    assert len(srv.requests) == 1 and not waits.waits
    (replica,) = result.replicas
    assert (replica.served, replica.rejected, replica.failures) == (0, 1, 0)


async def test_a_tool_error_is_not_retried() -> None:
    agent = Agent(name="strict", model="m", instructions="x", tools=[broken], tool_errors="raise")
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, _, waits = await run(http, agent=agent, sessions=2)
    for s in result.sessions:
        assert isinstance(s.error, ToolError) and len(s.turns) == 1
    assert len(sim.seen) == 2 and not waits.waits


class Overflowing:
    """A context policy whose prompt never fits."""

    def bind(
        self, *, session_id: str, agent: str, emit: Callable[[Event], None], **_: Any
    ) -> Overflowing:
        self.session_id = session_id
        return self

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo:
        raise ContextOverflow("too long", session_id=self.session_id, tokens=9999, limit=100)

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        return None


async def test_a_context_overflow_is_not_retried() -> None:
    agent = Agent(name="huge", model="m", context=Overflowing())
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, _, waits = await run(http, agent=agent, sessions=2)
    assert all(isinstance(s.error, ContextOverflow) for s in result.sessions)
    assert not sim.seen and not waits.waits


async def test_retries_off() -> None:
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, _, waits = await run(Faulty(http, "server_error"), None, sessions=2)
        assert all(isinstance(s.error, ServerError) for s in result.sessions)
        assert len(sim.seen) == 2 and not waits.waits
        once = RetryPolicy(max_attempts=1)
        result, _, waits = await run(Faulty(http, "server_error"), once, sessions=2)
    assert all(isinstance(s.error, ServerError) for s in result.sessions)
    assert len(sim.seen) == 4 and not waits.waits


def test_what_is_retryable_and_what_blames_the_replica() -> None:
    policy = RetryPolicy()
    e = "http://x/v1"
    rate = RateLimitError("slow down", status=429, endpoint=e)
    bad = BadRequestError("no", status=400, endpoint=e)
    boom = ServerError("boom", status=502, endpoint=e)
    assert policy.retryable(rate) and not RetryPolicy.blames_replica(rate)
    assert not policy.retryable(bad) and not RetryPolicy.blames_replica(bad)
    assert policy.retryable(boom) and RetryPolicy.blames_replica(boom)
    assert not policy.retryable(ToolError("x", tool="t"))
    assert not RetryPolicy(retry_mid_stream=False).retryable(StreamInterrupted("cut"))
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="backoff_s"):
        RetryPolicy(backoff_s=-1)
    for bad_limit in (0, -1.0, float("inf"), float("nan")):  # None means no limit
        with pytest.raises(ValueError, match="give_up_after_s"):
            RetryPolicy(give_up_after_s=bad_limit)


# --- Circuit breaker ----------------------------------------------------------------------


def test_breaker_opens_after_threshold_and_a_probe_closes_it() -> None:
    clock = FakeClock()
    b = CircuitBreaker(clock, threshold=3, cooldown_s=5.0, max_cooldown_s=12.0)
    for _ in range(2):
        b.on_failure(b.on_send())
    assert state(b) == "closed" and b.allows()  # 2 failures: under the threshold
    b.on_success(b.on_send())  # counted in the window (no reset): 2 failures of 3
    b.on_failure(b.on_send())  # 3 failures of 4 outcomes: over the 50% rate
    assert state(b) == "open" and not b.allows() and b.opened == 1
    assert b.opens_in_ns() == 5_000_000_000
    clock.advance(4.9)
    assert not b.allows()
    clock.advance(0.1)
    assert state(b) == "half_open" and b.allows() and b.opens_in_ns() == 0
    probe = b.on_send()
    assert probe and not b.allows()  # one probe at a time
    b.on_failure(probe)  # it failed: open again, cooldown doubled
    assert state(b) == "open" and b.opened == 2 and b.opens_in_ns() == 10_000_000_000
    clock.advance(10.0)
    b.on_failure(b.on_send())  # doubled again, capped at 12 s
    assert b.opens_in_ns() == 12_000_000_000
    clock.advance(12.0)
    assert b.allows()
    b.on_success(b.on_send())  # the probe succeeded: closed, cooldown back to 5 s
    assert state(b) == "closed" and b.failures == 0
    for _ in range(3):
        b.on_failure(b.on_send())
    assert b.opens_in_ns() == 5_000_000_000


def test_only_the_probe_decides_an_open_breaker() -> None:
    """Requests sent before the circuit opened say nothing about the endpoint now: a slow
    success does not close it, and a late failure does not re-open it over the probe."""
    clock = FakeClock()
    b = CircuitBreaker(clock, threshold=2, cooldown_s=5.0)
    slow = [b.on_send() for _ in range(3)]  # three long streams go out while all is well
    assert slow == [False, False, False]
    b.on_failure(slow[0])
    b.on_failure(slow[1])
    assert state(b) == "open" and b.opened == 1
    b.on_success(slow[2])  # sent before the trip: the circuit stays open
    assert state(b) == "open" and not b.allows()
    clock.advance(5.0)
    late = b.on_send()  # sent after the cooldown: the probe
    assert late is True and not b.allows()
    b.on_abandon(False)  # some other request was cancelled: the probe is still out
    assert not b.allows()
    b.on_failure(False)  # and a stale failure neither re-opens nor doubles the cooldown
    assert state(b) == "half_open" and b.opened == 1
    b.on_success(late)
    assert state(b) == "closed" and b.failures == 0


def test_breaker_rejects_bad_config() -> None:
    with pytest.raises(ValueError, match="threshold"):
        CircuitBreaker(FakeClock(), threshold=0)
    with pytest.raises(ValueError, match="cooldown_s"):
        CircuitBreaker(FakeClock(), cooldown_s=10.0, max_cooldown_s=5.0)


async def test_a_rate_limit_does_not_open_the_breaker() -> None:
    """429s are the server working as designed: they do not count against the replica,
    nor as served: each turn was served once, after three 429s (rejected)."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        faults = Faulty(http, *["rate_limit; retry_after=0"] * 3)
        policy = RetryPolicy(max_attempts=4, jitter=False)
        result, _, _ = await run(faults, policy, sessions=4)
    assert not result.failed
    (replica,) = result.replicas
    assert replica.breaker_opened == 0 and replica.failures == 0
    assert len(sim.seen) == 4 * 2 * 4
    assert replica.served == 4 * 2 and replica.rejected == 4 * 2 * 3


def test_a_lone_replicas_breaker_never_holds_its_turns_back() -> None:
    """Over real HTTP on the virtual clock: one replica, threshold 3, cooldown 5 s, four
    500s in a row. The breaker judges the replica failing but does not open — the router
    would have nowhere else to send, and every turn would wait for a probe — so each
    retry goes as soon as its backoff says (here at once: the waits are recorded, not
    slept), not 5 s and 10 s later behind a probe."""

    async def main() -> tuple[FleetResult, list[float], list[int]]:
        async with (
            RecordingSim() as sim,
            HTTPTransport(sim.base_url, clock=loop_clock) as http,
        ):
            replica = Replica(
                transport=Faulty(http, *["server_error"] * 4),
                breaker_threshold=3,
                breaker_cooldown_s=5.0,
            )
            fleet = Fleet(
                replica,
                clock=loop_clock,
                sleep=Waits(),
                retry=RetryPolicy(max_attempts=6, jitter=False),
            )
            result = await fleet.run([Agent(name="p", model="m").session("hello")])
        return result, [s.at for s in sim.seen], [s.status for s in sim.seen]

    result, arrivals, statuses = run_virtual(main())
    assert not result.failed and statuses == [500, 500, 500, 500, 200]
    start = arrivals[0]
    assert [round(t - start, 3) for t in arrivals] == [0.0] * 5
    (replica,) = result.replicas
    assert replica.breaker_opened == 0 and replica.breaker_held == 2  # 3rd and 4th failure
    assert replica.failures == 4 and replica.served == 1


def test_a_retry_that_fails_over_does_not_wait_out_the_retry_after_it_leaves() -> None:
    """Over real HTTP on the virtual clock: replica ``a`` answers 503 with
    ``Retry-After: 120``, ``b`` is healthy (one request at a time, fleet-wide). The retry
    goes to ``b`` after the usual backoff (0.25 s), not 120 s; and ``a`` gets nothing
    more until its 120 s are up — the next sessions go to ``b`` though ``a`` is idle and
    listed first."""

    async def main() -> tuple[FleetResult, int, int, float]:
        loop = asyncio.get_running_loop()
        unavailable = Reply.error(503, headers={"Retry-After": "120"})
        async with (
            ScriptedServer([unavailable] * 3) as sa,
            ScriptedServer([Reply.text(f"ok {i}") for i in range(3)]) as sb,
            HTTPTransport(sa.base_url, clock=loop_clock) as ta,
            HTTPTransport(sb.base_url, clock=loop_clock) as tb,
        ):
            fleet = Fleet(
                [Replica(transport=ta, name="a"), Replica(transport=tb, name="b")],
                max_concurrency=1,
                clock=loop_clock,
                retry=RetryPolicy(backoff_s=0.25, jitter=False),
                probe_slots=False,
            )
            start = loop.time()
            agent = Agent(name="p", model="m")
            result = await fleet.run([agent.session(f"task {i}") for i in range(3)])
            return result, len(sa.requests), len(sb.requests), loop.time() - start

    result, to_a, to_b, took = run_virtual(main())
    assert not result.failed and (to_a, to_b) == (1, 3)
    (failed,) = [f for s in result.sessions for t in s.turns for f in t.failed_attempts]
    assert failed.replica == "a" and failed.wait_s == 0.25
    assert took < 5.0  # (virtual) not 120 s


def test_the_retry_after_is_waited_out_when_the_retry_cannot_go_elsewhere() -> None:
    """The wait chosen for a 503 with ``Retry-After: 7``: 7 s when no other healthy
    replica can take the retry, or without failover; the backoff when one can."""
    error = ServerError("unavailable", status=503, body=None, retry_after=7.0)
    policy = RetryPolicy(jitter=False, backoff_s=0.25)
    state = RetryCallState(policy.retrying(sleep=Waits()), None, (), {})
    state.set_exception((ServerError, error, None))
    assert policy.wait_s(state) == 7.0
    assert policy.wait_s(state, elsewhere=True) == 0.25
    assert RetryPolicy(jitter=False, failover=False).wait_s(state, elsewhere=True) == 7.0
