"""A server's tool-call deltas cost the client work in proportion to what it sent.

Two shapes used to cost quadratic CPU on the event loop: a chunk of deltas without an
``index`` (each delta's place was found by walking the chunk's list again), and a name
split over many name-only deltas (each piece was joined to the held name, copying it
whole). A 40 000-delta chunk took 30 s in :meth:`TraceBuilder.feed`. These tests count
the work — walks of the list, characters copied — rather than timing it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentflow.transport import TraceBuilder
from agentflow.transport._tool_deltas import FunctionDelta, ToolCallDelta, ToolCalls


class _CountingDeltas(list[ToolCallDelta]):
    """A chunk's ``tool_calls`` that counts how often it is walked."""

    walks = 0

    def __iter__(self) -> Iterator[ToolCallDelta]:
        self.walks += 1
        return super().__iter__()


class _CountingName(str):
    """A piece of name that counts the characters copied by ``+`` on it."""

    copied = 0

    def __add__(self, other: str) -> _CountingName:
        out = _CountingName(str.__add__(self, other))
        _CountingName.copied += len(out)
        return out

    def __radd__(self, other: str) -> _CountingName:
        out = _CountingName(str.__add__(other, self))
        _CountingName.copied += len(out)
        return out


def test_deltas_without_an_index_are_keyed_in_one_walk_of_the_chunk() -> None:
    n = 2000
    deltas = _CountingDeltas(ToolCallDelta(function=FunctionDelta(arguments="x")) for _ in range(n))
    calls = ToolCalls()
    assert calls.add(deltas, 1, None) == n
    assert deltas.walks == 1
    got = calls.calls()
    assert [c.index for c in got] == list(range(n))
    assert {c.arguments for c in got} == {"x"}


def test_a_name_split_over_many_deltas_and_events_is_not_copied_per_piece() -> None:
    _CountingName.copied = 0
    pieces = [_CountingName(f"n{i}_") for i in range(3000)]
    calls = ToolCalls()
    for event in range(3):  # the pieces come over several events, a third in each
        part = pieces[event * 1000 : (event + 1) * 1000]
        calls.add(
            [ToolCallDelta(index=0, function=FunctionDelta(name=p)) for p in part], event, None
        )
    calls.add([ToolCallDelta(index=0, id="c1", function=FunctionDelta(arguments="{}"))], 3, None)
    sent = sum(map(len, pieces))
    (call,) = calls.calls()
    assert (call.id, call.name, call.arguments) == ("c1", "".join(pieces), "{}")
    assert _CountingName.copied <= sent


def test_a_40k_delta_chunk_without_indexes_parses_whole() -> None:
    """The reviewer's payload, end to end through the stream's decoder."""
    n = 40_000
    delta: dict[str, Any] = {"function": {"arguments": "x"}}
    body = {"choices": [{"index": 0, "delta": {"tool_calls": [delta] * n}}]}
    b = TraceBuilder(endpoint="http://x/v1", sent_ns=0)
    b.feed(json.dumps(body).encode(), 1)
    calls = b.finish(2).tool_calls
    assert len(calls) == n
    assert calls[-1].index == n - 1
    assert calls[-1].arguments == "x"


def test_indexed_deltas_do_not_pay_for_the_positions_of_unindexed_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The places in the list are worked out only for a chunk with a delta that has no
    index: the usual indexed chunk (one per output token) skips that work (+70 ns each)."""
    import agentflow.transport._tool_deltas as mod

    def no_enumerate(*args: object) -> None:  # (what the old per-delta count used)
        raise AssertionError("positions worked out for indexed deltas")

    monkeypatch.setattr(mod, "enumerate", no_enumerate, raising=False)
    calls = ToolCalls()
    calls.add([ToolCallDelta(index=0, id="c1", function=FunctionDelta(name="f"))], 0, None)
    calls.add([ToolCallDelta(index=0, function=FunctionDelta(arguments='{"a"'))], 1, None)
    calls.add([ToolCallDelta(index=0, function=FunctionDelta(arguments=": 1}"))], 2, None)
    monkeypatch.undo()
    (call,) = calls.calls()
    assert (call.id, call.name, call.arguments) == ("c1", "f", '{"a": 1}')
    # Unindexed deltas are still keyed by their place in the chunk.
    loose = ToolCalls()
    loose.add([ToolCallDelta(function=FunctionDelta(name=n)) for n in ("a", "b")], 0, None)
    loose.add([ToolCallDelta(function=FunctionDelta(arguments=x)) for x in ("1", "2")], 1, None)
    assert [(c.name, c.arguments) for c in loose.calls()] == [("a", "1"), ("b", "2")]
