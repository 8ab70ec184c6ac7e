"""A failed attempt's streamed tokens are announced for discarding, so a callback that
prints or collects tokens can rebuild exactly what the conversation kept.

The simulator on loopback breaks chosen attempts mid-stream (the ``X-Agentflow-Fault``
header, added per attempt by :class:`Faulty`); retries wait through an injected sleep
that returns at once.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from agentflow import (
    Agent,
    AttemptDiscardedEvent,
    ErrorEvent,
    Event,
    Fleet,
    FleetResult,
    HTTPTransport,
    Replica,
    RetryEvent,
    RetryPolicy,
    StreamInterrupted,
    TokenEvent,
    TurnEndEvent,
)
from agentflow.typing import Transport
from tests.sched.conftest import Faulty, RecordingSim


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


#: Two turns a session (the simulator's tool_rounds=1): a tool call, then the answer.
AGENT = Agent(name="looker", model="m", tools=[lookup], params={"max_tokens": 32})
POLICY = RetryPolicy(backoff_s=0.25, jitter=False)
SESSIONS = 6

Key = tuple[str, int]  # (session_id, turn)


class Rebuilder:
    """What a UI does with tokens: keep each turn's text by kind, and clear the turn when
    an attempt is discarded. Also checks each discard's counts against what it saw."""

    def __init__(self) -> None:
        self.text: dict[Key, dict[str, str]] = defaultdict(lambda: defaultdict(str))
        self.seen: dict[Key, list[TokenEvent]] = defaultdict(list)
        #: (the discard event, the text it told us to drop, by kind)
        self.dropped: list[tuple[AttemptDiscardedEvent, dict[str, str]]] = []

    def handle(self, event: Event) -> None:
        if isinstance(event, TokenEvent):
            key = (event.session_id, event.turn)
            self.text[key][event.kind] += event.text
            self.seen[key].append(event)
        elif isinstance(event, AttemptDiscardedEvent):
            key = (event.session_id, event.turn)
            tokens = self.seen.pop(key, [])
            assert event.deltas == len(tokens)
            assert event.chars == sum(len(t.text) for t in tokens)
            assert event.content_chars == sum(len(t.text) for t in tokens if t.kind == "content")
            self.dropped.append((event, dict(self.text.pop(key, {}))))

    def __call__(self, event: Event) -> None:
        self.handle(event)


class AsyncRebuilder(Rebuilder):
    """The same, as an async callback (fed in order by the bus's dispatcher task)."""

    async def __call__(self, event: Event) -> None:  # type: ignore[override]
        self.handle(event)
        await asyncio.sleep(0)


class Waits:
    """An injected ``sleep`` that returns at once."""

    async def __call__(self, seconds: float) -> None:
        await asyncio.sleep(0)


def replica(transport: Transport) -> Replica:
    """The replica, its circuit breaker out of the way (a threshold no test reaches):
    these tests break attempts on purpose."""
    return Replica(transport=transport, breaker_threshold=1000)


async def run(
    transport: Transport, *callbacks: Any, policy: RetryPolicy = POLICY
) -> tuple[FleetResult, list[Event]]:
    events: list[Event] = []
    callbacks = (events.append, *callbacks)
    fleet = Fleet(replica(transport), retry=policy, sleep=Waits(), callbacks=callbacks)
    result = await fleet.run(AGENT.session(f"task {i}") for i in range(SESSIONS))
    return result, events


async def test_a_callback_rebuilds_exactly_what_the_conversation_kept() -> None:
    """Every turn's first attempt is reset after 3 tokens. A callback that clears a turn
    on AttemptDiscardedEvent ends with exactly each turn's kept text — the final answer
    and the tool-call arguments — and what it dropped is the failed attempt's output."""
    sync, async_ = Rebuilder(), AsyncRebuilder()
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, events = await run(Faulty(http, "reset_mid_stream; after=3"), sync, async_)
    assert not result.failed, [s.error for s in result.failed]
    for rebuilt in (sync, async_):
        for s in result.sessions:
            assert len(s.turns) == 2
            for t in s.turns:
                text = rebuilt.text[(s.session_id, t.index)]
                assert text.get("content", "") == (t.trace.content or "")
                args = "".join(c.arguments for c in t.trace.tool_calls)
                assert text.get("tool_call", "") == args
            assert rebuilt.text[(s.session_id, 1)]["content"] == s.final_output
            assert s.messages[-1]["content"] == s.final_output  # only the kept attempt
        # One discard per failed attempt; what it dropped is that attempt's partial output.
        assert len(rebuilt.dropped) == 2 * SESSIONS
        failed = {
            (s.session_id, t.index): t.failed_attempts for s in result.sessions for t in s.turns
        }
        for event, dropped in rebuilt.dropped:
            (attempt,) = failed[(event.session_id, event.turn)]
            assert event.attempt == attempt.attempt == 0 and event.retried
            assert isinstance(event.error, StreamInterrupted) and event.error is attempt.error
            assert event.deltas > 0
            assert attempt.trace is not None
            assert dropped.get("content", "") == (attempt.trace.content or "")
    # Each discard comes right before its attempt's RetryEvent, after its last token.
    for i, e in enumerate(events):
        if isinstance(e, AttemptDiscardedEvent):
            nxt = events[i + 1]
            assert isinstance(nxt, RetryEvent)
            assert (nxt.session_id, nxt.turn, nxt.attempt.attempt) == (
                e.session_id,
                e.turn,
                e.attempt,
            )
    assert sum(isinstance(e, AttemptDiscardedEvent) for e in events) == result.retries


async def test_the_last_failed_attempt_is_discarded_before_the_session_error() -> None:
    """When the policy gives up, the last attempt's tokens are discarded too
    (``retried=False``), before the session's ErrorEvent; nothing of the turn is kept."""
    rebuilt = Rebuilder()
    fault = "reset_mid_stream; after=2"
    policy = RetryPolicy(max_attempts=2, backoff_s=0.25, jitter=False)
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result, events = await run(Faulty(http, fault, fault), rebuilt, policy=policy)
    assert len(result.failed) == SESSIONS
    for s in result.sessions:
        assert isinstance(s.error, StreamInterrupted) and not s.turns
        mine = [
            e
            for e in events
            if getattr(e, "session_id", None) == s.session_id
            and isinstance(e, AttemptDiscardedEvent | RetryEvent | ErrorEvent | TurnEndEvent)
        ]
        assert [type(e) for e in mine] == [
            AttemptDiscardedEvent,
            RetryEvent,
            AttemptDiscardedEvent,
            ErrorEvent,
        ]
        first, _, last, error = mine
        assert isinstance(first, AttemptDiscardedEvent) and isinstance(last, AttemptDiscardedEvent)
        assert (first.attempt, first.retried) == (0, True)
        assert (last.attempt, last.retried) == (1, False) and last.deltas > 0
        assert isinstance(error, ErrorEvent) and error.error is last.error is s.error
        assert (s.session_id, 0) not in rebuilt.text  # everything streamed was dropped


async def test_discards_are_announced_when_nobody_reads_tokens() -> None:
    """A callback that reads no tokens (so none are built) still gets one discard per
    failed attempt, with zero counts, before the RetryEvent."""

    class Counts:
        event_types = frozenset({"attempt_discarded", "retry"})

        def __init__(self) -> None:
            self.events: list[Event] = []

        def __call__(self, event: Event) -> None:
            self.events.append(event)

    counts = Counts()
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(
            replica(Faulty(http, "reset_mid_stream; after=3")),
            retry=POLICY,
            sleep=Waits(),
            callbacks=[counts],
        )
        result = await fleet.run(AGENT.session(f"task {i}") for i in range(SESSIONS))
    assert not result.failed
    types = [type(e) for e in counts.events]
    assert types == [AttemptDiscardedEvent, RetryEvent] * (2 * SESSIONS)
    discards = [e for e in counts.events if isinstance(e, AttemptDiscardedEvent)]
    assert all((e.deltas, e.chars, e.content_chars) == (0, 0, 0) for e in discards)
