"""A surrogate pair cut between two events (a server that slices its text by UTF-16 code
units, as a JavaScript one may): the halves are joined into the character, in the trace
and for the sink; a half left alone becomes U+FFFD. Each half is a lone ``\\uXXXX``
escape msgspec refuses, and the stream was a StreamProtocolError ("malformed chunk …
Input data was truncated") in the middle of an emoji."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

import msgspec
import pytest

from agentflow import StreamProtocolError
from agentflow.testing import sse_frames

from .rawserver import KINDS, TINY_REQUEST, chunk, head, make_transport, raw_server
from .test_decode import Recorder, build, payload

HIGH, LOW = "\ud83d", "\ude00"  # 😀 (U+1F600) as UTF-16: json.dumps writes each as \uXXXX


def test_a_pair_cut_between_two_events_is_one_character() -> None:
    rec = Recorder()
    b = build([payload({"content": "I " + HIGH}), payload({"content": LOW + " it"}, "stop")], rec)
    assert b'"I \\ud83d"' in payload({"content": "I " + HIGH})  # what a JS server sends
    trace = b.finish(9000)
    assert trace.content == "I 😀 it" and trace.finish_reason == "stop"
    assert rec.deltas == [("content", "I ", 2000), ("content", "😀 it", 2100)]
    assert trace.n_events == 2 and trace.chunk_ns == (2000, 2100)
    msgspec.json.encode(trace)  # no lone surrogate left: it encodes


def test_a_lone_half_is_u_fffd_in_the_trace_and_for_the_sink() -> None:
    """A high half followed by other text (that chunk msgspec reads), a high half at the
    very end (the sink gets its U+FFFD when the stream is finished), a lone low half."""
    rec = Recorder()
    b = build(
        [
            payload({"content": "a" + HIGH}),
            payload({"content": "b"}),
            payload({"content": LOW + "c"}),
            payload({"content": "d" + HIGH}, "stop"),
        ],
        rec,
    )
    trace = b.finish(9000)
    assert trace.content == "a\ufffdb\ufffdcd\ufffd"
    assert "".join(text for _, text, _ in rec.deltas) == trace.content
    assert rec.deltas[-2:] == [("content", "d", 2300), ("content", "\ufffd", 9000)]
    assert b.finish(9500).content == trace.content and len(rec.deltas) == 5  # given once


def test_a_lone_half_in_the_id_or_model_is_mended_too() -> None:
    """Not only the text: a run store keeps UTF-8, and left a turn whose response id or
    model held a lone half out of the store."""
    b = build([payload({"content": "x"}, "stop", id="id" + HIGH, model="m" + LOW)], Recorder())
    trace = b.finish(9000)
    assert (trace.response_id, trace.model) == ("id\ufffd", "m\ufffd")
    msgspec.json.encode(trace)


def test_reasoning_and_tool_calls_are_mended_too() -> None:
    rec = Recorder()
    call = {"index": 0, "id": "c", "function": {"name": "say", "arguments": '{"x": "' + HIGH}}
    more = {"index": 0, "function": {"arguments": LOW + '"}'}}
    b = build(
        [
            payload({"reasoning_content": "hm" + HIGH}),
            payload({"reasoning_content": LOW}),
            payload({"tool_calls": [call]}),
            payload({"tool_calls": [more]}, "tool_calls"),
        ],
        rec,
    )
    trace = b.finish(9000)
    assert trace.reasoning == "hm😀"
    assert trace.tool_calls[0].arguments == '{"x": "😀"}' and trace.tool_calls[0].name == "say"
    assert [d[:2] for d in rec.deltas] == [
        ("reasoning", "hm"),
        ("reasoning", "😀"),
        ("tool_call", '{"x": "'),
        ("tool_call", '😀"}'),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        b'{"choices": [{"delta": {"content": "\\ud83d"}}]',  # cut short
        b'{"choices": [{"delta": {"content": "\\ud83d"}}], "usage": NaN}',
        b'{"choices": [{"delta": {"content": "\\ud83d"}}], "timings": {"t": 1e999}}',
        b'{"choices": [{"delta": {"content": 5, "reasoning": "\\ud83d"}}]}',
        b'\xef\xbb\xbf{"choices": [{"delta": {"content": "\\ud83d"}}]}',
    ],
    ids=["truncated", "nan", "out-of-range", "wrong-type", "bom"],
)
def test_a_chunk_with_more_wrong_than_a_lone_half_is_still_malformed(bad: bytes) -> None:
    """The standard library's parser reads a lone surrogate, but not what msgspec refuses
    for another reason: that is a malformed chunk, with msgspec's message."""
    with pytest.raises(StreamProtocolError, match="malformed chunk from http://x/v1: ") as info:
        build([payload({"content": "ok"}), bad])
    assert info.value.payload == bad
    assert info.value.trace is not None and info.value.trace.content == "ok"


def _chunk(content: str, finish: str | None = None) -> dict[str, Any]:
    delta = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return {"id": "x", "model": "m", "choices": [delta]}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_pair_cut_between_events_over_http(kind: str) -> None:
    body = b"".join(sse_frames([_chunk("I " + HIGH), _chunk(LOW + " it", "stop")]))
    assert b"\\ud83d" in body and json.loads(body.split(b"\n")[0][6:])

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head() + chunk(body) + chunk(b""))
        await writer.drain()

    async with raw_server(answer) as srv, aclosing(make_transport(kind, srv.base_url)) as t:
        rec = Recorder()
        trace = await t.stream(TINY_REQUEST, rec)
    assert trace.content == "I 😀 it" and trace.done
    assert [text for _, text, _ in rec.deltas] == ["I ", "😀 it"]
