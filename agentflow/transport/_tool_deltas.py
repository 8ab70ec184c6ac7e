"""A turn's tool calls put together from their streamed deltas (a part of
:class:`~agentflow.transport.TraceBuilder`'s per-chunk path).

The usual stream (OpenAI, vLLM, SGLang, llama.cpp, the simulator) labels every delta
of a call with the call's ``index``: the first brings its ``id`` and ``name``, the
others pieces of its ``arguments``. Some servers stream otherwise, and each is taken
as the calls it means:

* the same index for several calls (Ollama labels every call of a turn ``index: 0``,
  each call whole in one delta): a delta that brings a name and an ``id`` other than
  the one held at its index, or a name other than the held one once that call's
  arguments have begun, opens a new call;
* no index at all (Gemini's OpenAI-compatible endpoint): a delta is keyed by its
  position in its chunk's list;
* the name (and id) repeated on every delta: a name equal to the held one is not
  appended again. Only a delta that brings a piece of name alone (no id, no
  arguments) before any argument can be the rest of a name split over deltas, and
  only such a piece is joined to it;
* an id that changes after the call's first delta, with no name (Poolside): the same
  call, under the id it opened with.

Calls come out ordered by index, those sharing one in the order they opened, each
with its position in that order as its :attr:`~agentflow.ToolCall.index`.
"""

from __future__ import annotations

import secrets

import msgspec

from agentflow._trace import ToolCall
from agentflow.typing import DeltaSink

__all__ = ["FunctionDelta", "ToolCallDelta", "ToolCalls"]


class FunctionDelta(msgspec.Struct):
    """A delta's ``function``: a piece of the call's name, of its arguments, or both."""

    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct):
    """One entry of a delta's ``tool_calls``; ``index`` ``None`` when the server sent none."""

    index: int | None = None
    id: str | None = None
    function: FunctionDelta | None = None


class _Parts:
    """One call's pieces. Its name is kept as pieces too, with their total length: a
    server may split a name over any number of deltas and events, and joining each
    piece to the held name would copy it whole every time (quadratic CPU on the
    event loop)."""

    __slots__ = ("args", "id", "index", "name_len", "names")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id = ""
        self.names: list[str] = []
        self.name_len = 0
        self.args: list[str] = []

    def name(self) -> str:
        """The name so far, its pieces joined (and kept joined)."""
        names = self.names
        if len(names) > 1:
            names[:] = ["".join(names)]
        return names[0] if names else ""

    def is_named(self, name: str) -> bool:
        """Whether the name so far is ``name``: joined only when the lengths match, so
        the work is no more than the delta that asks."""
        return len(name) == self.name_len and self.name() == name

    def add_name(self, name: str) -> None:
        self.names.append(name)
        self.name_len += len(name)


class ToolCalls:
    """The calls of one stream so far: :meth:`add` per chunk, :meth:`calls` at the end."""

    __slots__ = ("_open", "_parts")

    def __init__(self) -> None:
        self._open: dict[int, _Parts] = {}  # the call each index (or position) adds to
        self._parts: list[_Parts] = []  # every call, in the order it opened

    def add(self, deltas: list[ToolCallDelta], t_ns: int, sink: DeltaSink | None) -> int:
        """Take one chunk's ``tool_calls``; the characters of output they carried."""
        chars = 0
        open_calls = self._open
        places: dict[int, int] | None = None
        for d in deltas:
            key = d.index
            if key is None:
                # A delta sent with no index is keyed by its place in the list (looked up
                # once per chunk that needs it, by index, still linear work: indexed
                # deltas, the usual, pay nothing).
                if places is None:
                    places = {id(deltas[i]): i for i in range(len(deltas))}
                key = places[id(d)]
            parts = open_calls.get(key)
            fn = d.function
            name = fn.name if fn is not None else None
            if name:
                if parts is None or _opens_another(parts, d.id, name):
                    parts = self._new(key)
                chars += _add_name(parts, name, d.id, fn.arguments if fn is not None else None)
            elif parts is None:
                parts = self._new(key)
            if d.id and not parts.id:
                parts.id = d.id
            if fn is not None and fn.arguments:
                parts.args.append(fn.arguments)
                chars += len(fn.arguments)
                if sink is not None:
                    sink.on_delta("tool_call", fn.arguments, t_ns)
        return chars

    def _new(self, key: int) -> _Parts:
        """A call opened at index (or position) ``key``, to which its deltas add now."""
        parts = self._open[key] = _Parts(key)
        self._parts.append(parts)
        return parts

    def calls(self) -> tuple[ToolCall, ...]:
        """The calls as they stand: ordered by index, then by when they opened."""
        ordered = sorted(self._parts, key=_index_of)
        return tuple(
            ToolCall(
                index=i, id=p.id or _fallback_id(p, i), name=p.name(), arguments="".join(p.args)
            )
            for i, p in enumerate(ordered)
        )


def _index_of(parts: _Parts) -> int:
    return parts.index


def _opens_another(parts: _Parts, call_id: str | None, name: str) -> bool:
    """Whether a delta bringing ``name`` (and ``call_id``) is another call than
    ``parts``, which holds the same index: a call named already, under another id, or
    with its arguments begun and another name."""
    if not parts.name_len:
        return False
    if call_id and parts.id and call_id != parts.id:
        return True
    return bool(parts.args) and not parts.is_named(name)


def _add_name(parts: _Parts, name: str, call_id: str | None, arguments: str | None) -> int:
    """Give ``parts`` a delta's ``name``; the characters added. A name equal to the
    held one is its repetition, unless the delta brings nothing else and no argument
    has arrived: then it is the rest of a name split in two equal halves."""
    if not parts.name_len or not parts.is_named(name) or not (call_id or arguments or parts.args):
        parts.add_name(name)
    else:
        return 0
    return len(name)


def _fallback_id(parts: _Parts, index: int) -> str:
    """An id for a tool call the server sent none for: ``call_<random>_<index>``,
    unique in the conversation (a bare ``call_<index>`` recurs in every turn, and a
    tool result is known by its call's id — in the transcript and in a run store).
    Kept on ``parts``, so every :meth:`ToolCalls.calls` of the stream names the call
    alike."""
    parts.id = f"call_{secrets.token_hex(6)}_{index}"
    return parts.id
