"""Half a UTF-16 surrogate pair in a chunk: a character a server cut between two events.

A server that slices its text by UTF-16 code units (a JavaScript one, or a proxy written
in one) can end one event's ``content`` with the high half of an astral character's pair
(``"\\ud83d"``) and start the next with the low half (``"\\ude00"``): each event is JSON
that ``JSON.stringify`` writes and most parsers read, but msgspec refuses a lone
surrogate escape ("Input data was truncated", "invalid utf-16 surrogate pair"), and the
stream was a :class:`StreamProtocolError` in the middle of an emoji. (vLLM and SGLang
write Python strings, which hold whole code points, and llama.cpp holds back a token's
incomplete UTF-8: neither cuts a pair.)

Only a payload msgspec has refused comes here, so a stream without one pays nothing:

- :func:`lenient_decode` reads it with the standard library's parser, which keeps a lone
  surrogate in the string (still refusing ``NaN``, ``Infinity`` and numbers out of
  range, as msgspec does), then builds the same struct from it;
- :func:`~agentflow._sendable.sendable_text` (the one a tool's output goes through too)
  joins, in text put together from such strings, each high half with the low half that
  follows it, and turns a half left alone into U+FFFD;
- :class:`PairingSink` does that for a sink's deltas as they go (the builder's sink is
  wrapped in one from the first such payload on, :func:`pairing`): a delta that ends with
  a high half keeps it back for the next delta of its kind;
- :func:`mended` gives the stream's trace its text mended, at its end.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from typing import TypeVar

import msgspec

from agentflow._sendable import sendable_text
from agentflow._trace import TurnTrace
from agentflow.typing import DeltaKind, DeltaSink

__all__ = ["PairingSink", "lenient_decode", "mended", "pairing"]

T = TypeVar("T")


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text}")
    return value


def lenient_decode(payload: bytes, into: type[T]) -> T | None:
    """``payload`` decoded into ``into`` with lone surrogates kept in its strings, or
    ``None`` when it has no surrogate escape, or is no valid JSON of that shape for
    another reason too."""
    if _SURROGATE_ESCAPE.search(payload) is None:
        return None
    try:
        # Decoded first: json.loads(bytes) would also take a BOM, which msgspec does not.
        text = payload.decode("utf-8")
        obj = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
        return msgspec.convert(obj, into)
    except (ValueError, msgspec.ValidationError):  # UnicodeDecodeError is a ValueError
        return None


#: A ``\uXXXX`` escape of a surrogate (U+D800–U+DFFF), either half.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class PairingSink:
    """A sink's deltas, mended: a high half that ends a delta waits for the next delta
    of its kind (whose low half it pairs with); :meth:`flush` gives what still waits,
    as U+FFFD, at the stream's end. With no sink it only marks the stream as one to mend."""

    __slots__ = ("_held", "_sink")

    def __init__(self, sink: DeltaSink | None) -> None:
        self._sink = sink
        self._held: dict[DeltaKind, str] = {}

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        """Pass ``text`` on, mended, less a high half at its end (kept for the next)."""
        if self._sink is None:
            return
        held = self._held.pop(kind, None)
        if held is not None:
            text = held + text
        if text and "\ud800" <= text[-1] <= "\udbff":
            self._held[kind] = text[-1]
            text = text[:-1]
        if text:
            self._sink.on_delta(kind, sendable_text(text), t_ns)

    def flush(self, t_ns: int) -> None:
        """The stream ended: each high half still held is passed on as U+FFFD."""
        held = list(self._held)
        self._held.clear()
        for kind in held:
            self._sink.on_delta(kind, "\ufffd", t_ns)  # type: ignore[union-attr]  # held: a sink


def pairing(sink: DeltaSink | None) -> PairingSink:
    """``sink`` wrapped in a :class:`PairingSink` (once: one already is is kept)."""
    return sink if isinstance(sink, PairingSink) else PairingSink(sink)


def mended(trace: TurnTrace, sink: PairingSink, end_ns: int) -> TurnTrace:
    """``trace`` (of a stream that had a lone surrogate) with its text mended, and what
    ``sink`` still holds given to it, as of ``end_ns``."""
    sink.flush(end_ns)
    calls = tuple(
        replace(
            c,
            id=sendable_text(c.id),
            name=sendable_text(c.name),
            arguments=sendable_text(c.arguments),
        )
        for c in trace.tool_calls
    )
    return replace(
        trace,
        content=sendable_text(trace.content),
        reasoning=sendable_text(trace.reasoning),
        tool_calls=calls,
        # A lone half elsewhere too: a run store keeps UTF-8 text, and left the turn out.
        model=_mend_opt(trace.model),
        response_id=_mend_opt(trace.response_id),
        finish_reason=_mend_opt(trace.finish_reason),
    )


def _mend_opt(text: str | None) -> str | None:
    return None if text is None else sendable_text(text)
