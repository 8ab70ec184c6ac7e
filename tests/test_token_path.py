"""The per-token path: one :class:`TokenEvent` per streamed delta, shared by every
consumer, and a counting callback that sees exactly every token — over real loopback
HTTP through a :class:`Fleet`, with attempts broken mid-stream and retried.

Objects are counted, not timed: a ``TokenEvent`` subclass that counts its own
construction (msgspec calls ``__post_init__`` for every instance) stands in for the
class the token sink builds.
"""

from __future__ import annotations

import copy
import pickle
from collections import Counter, defaultdict
from typing import Any

import msgspec
import pytest

import agentflow._turn_events as turn_events
from agentflow import (
    Agent,
    AttemptDiscardedEvent,
    ErrorEvent,
    Event,
    Fleet,
    HTTPTransport,
    RetryPolicy,
    TokenEvent,
)
from agentflow._event_bus import CALLBACK_FAILURES_KEPT, EventBus
from agentflow._turn_events import TurnEvents
from tests.sched.conftest import Faulty, RecordingSim
from tests.test_attempt_discard import Waits, replica

#: No tools: every turn is one answer, and every chunk with output is one content delta.
AGENT = Agent(name="writer", model="m", params={"max_tokens": 24})
SESSIONS = 8
POLICY = RetryPolicy(backoff_s=0.25, jitter=False)

Key = tuple[str, int]


class CountedTokenEvent(TokenEvent, frozen=True, kw_only=True, gc=False):
    """A ``TokenEvent`` that counts how many were built."""

    def __post_init__(self) -> None:
        BUILT[0] += 1


BUILT = [0]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the token sink build :class:`CountedTokenEvent`s; yields the count."""
    BUILT[0] = 0
    monkeypatch.setattr(turn_events, "TokenEvent", CountedTokenEvent)
    return BUILT


class TokenCounter:
    """What a user writes to count tokens: per turn, net of discarded attempts."""

    def __init__(self) -> None:
        self.count: Counter[Key] = Counter()
        self.text: dict[Key, str] = defaultdict(str)
        self.attempt: Counter[Key] = Counter()  # tokens of the attempt in progress
        self.total = 0  # every TokenEvent seen, kept or discarded
        self.discards: list[tuple[AttemptDiscardedEvent, int]] = []

    def __call__(self, event: Event) -> None:
        if event.type == "token":
            key = (event.session_id, event.turn)
            self.total += 1
            self.count[key] += 1
            self.attempt[key] += 1
            self.text[key] += event.text
        elif event.type == "attempt_discarded":
            key = (event.session_id, event.turn)
            self.discards.append((event, self.attempt.pop(key, 0)))
            self.count.pop(key, None)
            self.text.pop(key, None)


def check_counts(counter: TokenCounter, result: Any) -> None:
    """Every kept token counted once; every discard's counts equal what was streamed."""
    assert not result.failed, [s.error for s in result.failed]
    for s in result.sessions:
        (turn,) = s.turns
        key = (s.session_id, 0)
        trace = turn.trace
        # no tools, no reasoning: every chunk with output carried one content delta
        assert counter.count[key] == len(trace.chunk_ns) > 0
        assert counter.text[key] == trace.content == s.final_output
    for event, streamed in counter.discards:
        assert event.deltas == streamed > 0
        assert event.content_chars == event.chars > 0
    kept = sum(len(s.turns[0].trace.chunk_ns) for s in result.sessions)
    assert counter.total == kept + sum(e.deltas for e, _ in counter.discards)


async def test_a_counting_callback_sees_every_token_and_one_object_is_built_per_delta(
    counted: list[int],
) -> None:
    """Over loopback HTTP, every first attempt reset after 3 tokens and retried: the
    counting callback ends with exactly each kept turn's tokens; one TokenEvent is built
    per delta and handed, the same object, to every callback that reads tokens; a
    callback that reads no tokens causes none to be built for it."""
    counter = TokenCounter()
    seen: list[TokenEvent] = []
    turns_only: list[str] = []

    def keep(event: Event) -> None:
        if isinstance(event, TokenEvent):
            seen.append(event)

    def no_tokens(event: Event) -> None:
        turns_only.append(event.type)

    no_tokens.event_types = frozenset({"turn_end"})  # type: ignore[attr-defined]

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        faulty = Faulty(http, "reset_mid_stream; after=3")
        fleet = Fleet(
            replica(faulty), retry=POLICY, sleep=Waits(), callbacks=[counter, keep, no_tokens]
        )
        result = await fleet.run(AGENT.session(f"task {i}") for i in range(SESSIONS))
    assert faulty.faulted == SESSIONS and len(counter.discards) == SESSIONS
    check_counts(counter, result)
    assert counted[0] == counter.total == len(seen)  # one object per delta, no more
    assert all(type(e) is CountedTokenEvent for e in seen)
    assert turns_only == ["turn_end"] * SESSIONS


async def test_async_consumers_get_the_same_single_object_per_delta(counted: list[int]) -> None:
    """With an async callback and a `Fleet.stream` iterator reading tokens too (the
    in-order path through the bus), still one TokenEvent per delta, and every consumer
    gets that object; the counts stay exact across retries."""
    counter = TokenCounter()
    sync_seen: list[TokenEvent] = []
    async_seen: list[TokenEvent] = []

    def keep(event: Event) -> None:
        if isinstance(event, TokenEvent):
            sync_seen.append(event)

    async def keep_async(event: Event) -> None:
        if isinstance(event, TokenEvent):
            async_seen.append(event)

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        faulty = Faulty(http, "reset_mid_stream; after=3")
        fleet = Fleet(
            replica(faulty), retry=POLICY, sleep=Waits(), callbacks=[counter, keep, keep_async]
        )
        streamed = [
            e
            async for e in fleet.stream(AGENT.session(f"task {i}") for i in range(SESSIONS))
            if isinstance(e, TokenEvent)
        ]
    assert counted[0] == counter.total == len(sync_seen) == len(async_seen) == len(streamed)
    assert all(a is b is c for a, b, c in zip(sync_seen, async_seen, streamed, strict=True))
    assert len(counter.discards) == SESSIONS


async def test_a_raising_token_callback_is_reported_and_the_others_still_count() -> None:
    """On the direct per-token path a callback that raises is recorded and reported as an
    ErrorEvent(where="callback") for its first 10 tokens, counted for the others, and the
    callback after it still sees every token."""
    counter = TokenCounter()
    errors: list[ErrorEvent] = []

    def bad(event: Event) -> None:
        if event.type == "token":
            raise ValueError("boom")
        if isinstance(event, ErrorEvent):
            errors.append(event)

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(replica(http), callbacks=[bad, counter])
        result = await fleet.run(AGENT.session(f"task {i}") for i in range(SESSIONS))
    check_counts(counter, result)
    assert len(result.callback_errors) == CALLBACK_FAILURES_KEPT == len(errors)
    assert result.callback_errors_dropped == counter.total - CALLBACK_FAILURES_KEPT
    assert all(isinstance(f.error, ValueError) for f in result.callback_errors)
    assert all(e.where == "callback" and e.turn == 0 for e in errors)


def test_the_sink_builds_one_event_per_delta_and_counts_exactly(counted: list[int]) -> None:
    """Straight through a turn's sink: N deltas of mixed kinds → N events, counts exact;
    with no token reader there is no sink, so nothing is built."""
    got: list[Event] = []
    bus = EventBus([got.append])
    sink = TurnEvents(bus, "a", "s", 3).sink
    assert sink is not None
    deltas = [("content", "ab", 1), ("reasoning", "xyz", 2), ("tool_call", "{", 3)] * 50
    for kind, text, t in deltas:
        sink.on_delta(kind, text, t)  # type: ignore[arg-type]
    assert counted[0] == len(got) == len(deltas)
    assert all(isinstance(e, TokenEvent) for e in got)
    tokens = [e for e in got if isinstance(e, TokenEvent)]
    assert [(e.kind, e.text, e.t_ns, e.turn) for e in tokens] == [
        (k, x, t, 3) for k, x, t in deltas
    ]
    assert sink.take() == (150, 50 * 6, 50 * 2)
    assert sink.take() == (0, 0, 0)

    def turns_only(event: Event) -> None:
        pass

    turns_only.event_types = frozenset({"turn_end"})  # type: ignore[attr-defined]
    assert TurnEvents(EventBus([turns_only]), "a", "s", 0).sink is None


def test_token_events_stay_immutable_comparable_and_picklable() -> None:
    """What users relied on with the dataclass: keyword-only, frozen, equal by value,
    hashable, picklable, a readable repr; ``msgspec.structs.replace`` makes a copy."""
    e = TokenEvent(agent="a", session_id="s", turn=1, kind="content", text="hi", t_ns=5)
    assert e.type == "token"
    with pytest.raises(AttributeError):
        e.text = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        TokenEvent("a", "s", 1, "content", "hi", 5)  # type: ignore[call-arg]
    same = TokenEvent(agent="a", session_id="s", turn=1, kind="content", text="hi", t_ns=5)
    assert e == same and hash(e) == hash(same) and len({e, same}) == 1
    assert pickle.loads(pickle.dumps(e)) == e == copy.copy(e)
    assert repr(e).startswith("TokenEvent(agent='a', session_id='s', turn=1")
    changed = msgspec.structs.replace(e, text="ho")
    assert changed.text == "ho" and e.text == "hi"
