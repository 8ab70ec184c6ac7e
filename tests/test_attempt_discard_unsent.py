"""A turn that fails before an attempt is sent announces no AttemptDiscardedEvent: no
attempt ran, so there are no tokens to drop (it used to announce one with zero counts).

The failure is a scheduling policy that raises while the turn waits for its slot — at
the fleet's first-turn queueing, at a later turn's acquire, and at a retry's acquire
after a real attempt on the simulator (loopback) failed mid-stream.
"""

from __future__ import annotations

from collections.abc import Callable

from agentflow import (
    AttemptDiscardedEvent,
    ErrorEvent,
    Event,
    Fleet,
    HTTPTransport,
    RetryEvent,
    StreamInterrupted,
    TokenEvent,
    TurnEndEvent,
)
from agentflow.sched import FCFS, SchedulerState, Ticket
from agentflow.typing import Transport
from tests.sched.conftest import Faulty, RecordingSim
from tests.test_attempt_discard import AGENT, POLICY, Rebuilder, Waits, replica

SESSIONS = 3


class Refuses:
    """FCFS, except that it raises for the tickets ``refuse`` picks."""

    def __init__(self, refuse: Callable[[Ticket], bool]) -> None:
        self.refuse = refuse
        self.refused = 0

    def __call__(self, ticket: Ticket, state: SchedulerState, /) -> float:
        if self.refuse(ticket):
            self.refused += 1
            raise LookupError(f"no rank for turn {ticket.turn} attempt {ticket.attempt}")
        return FCFS()(ticket, state)


async def run(
    transport: Transport, refuse: Callable[[Ticket], bool]
) -> tuple[list[Event], Rebuilder, int]:
    events: list[Event] = []
    rebuilt = Rebuilder()  # reads tokens, so every attempt's deltas are counted
    policy = Refuses(refuse)
    fleet = Fleet(
        replica(transport),
        retry=POLICY,
        sleep=Waits(),
        policy=policy,
        callbacks=[events.append, rebuilt],
    )
    result = await fleet.run(AGENT.session(f"task {i}") for i in range(SESSIONS))
    assert len(result.failed) == SESSIONS
    assert all(isinstance(s.error, LookupError) for s in result.sessions)
    return events, rebuilt, policy.refused


def kinds(events: list[Event], session_id: str) -> list[type]:
    return [
        type(e)
        for e in events
        if getattr(e, "session_id", None) == session_id
        and isinstance(e, AttemptDiscardedEvent | RetryEvent | ErrorEvent | TurnEndEvent)
    ]


async def test_a_first_turn_refused_while_queued_has_no_discard() -> None:
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        events, rebuilt, refused = await run(http, lambda t: t.turn == 0)
        assert not sim.seen  # nothing was sent
    assert refused == SESSIONS
    assert not any(isinstance(e, AttemptDiscardedEvent | TokenEvent) for e in events)
    assert sum(isinstance(e, ErrorEvent) for e in events) == SESSIONS
    assert not rebuilt.dropped


async def test_a_later_turn_refused_at_its_acquire_has_no_discard() -> None:
    """Turn 0 (a tool call) streams and ends; turn 1 is refused its slot."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        events, rebuilt, _ = await run(http, lambda t: t.turn == 1)
        assert len(sim.seen) == SESSIONS  # only the first turns went out
    for sid in {e.session_id or "" for e in events if isinstance(e, ErrorEvent)}:
        assert kinds(events, sid) == [TurnEndEvent, ErrorEvent]
    assert any(isinstance(e, TokenEvent) for e in events)  # turn 0's tokens stay
    assert not rebuilt.dropped


async def test_a_retry_refused_its_slot_discards_only_the_attempt_that_ran() -> None:
    """The first attempt is reset after 3 tokens (discarded, retried); the retry is then
    refused its slot: no second discard, whose counts would describe nothing sent."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        events, rebuilt, refused = await run(
            Faulty(http, "reset_mid_stream; after=3"), lambda t: t.attempt == 1
        )
        assert len(sim.seen) == SESSIONS
    assert refused == SESSIONS
    for sid in {e.session_id or "" for e in events if isinstance(e, ErrorEvent)}:
        assert kinds(events, sid) == [AttemptDiscardedEvent, RetryEvent, ErrorEvent]
    discards = [e for e in events if isinstance(e, AttemptDiscardedEvent)]
    assert len(discards) == SESSIONS == len(rebuilt.dropped)  # the Rebuilder checks counts
    for d in discards:
        assert (d.attempt, d.retried) == (0, True) and d.deltas > 0
        assert isinstance(d.error, StreamInterrupted)
