"""A stream that starts with a UTF-8 byte order mark, on the three transports over
loopback HTTP: the BOM is dropped (WHATWG "event stream interpretation") and the first
event is read. It was taken as part of the first line's field name, so the first event
— here the one that carries the first words — was dropped without a word."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from agentflow.testing import sse_frames

from .rawserver import KINDS, TINY_REQUEST, chunk, head, make_transport, raw_server

BOM = b"\xef\xbb\xbf"
BODY = b"".join(
    sse_frames(
        [
            {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"content": "Hello"}}]},
            {"id": "x", "choices": [{"index": 0, "delta": {"content": " world"}}]},
            {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
    )
)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cut", [0, 1, 2, 3], ids=["whole", "1+2", "2+1", "bom-alone"])
async def test_a_leading_bom_is_dropped(kind: str, cut: int) -> None:
    """The BOM whole in the first body chunk, or its bytes over two chunks (each its own
    read for ``HTTPTransport``, which parses a chunk's body as it arrives)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first, rest = (BOM + BODY)[:cut], (BOM + BODY)[cut:]
        writer.write(head() + (chunk(first) if first else b"") + chunk(rest) + chunk(b""))
        await writer.drain()

    async with raw_server(answer) as srv, aclosing(make_transport(kind, srv.base_url)) as t:
        trace = await t.stream(TINY_REQUEST)
    assert trace.content == "Hello world"
    assert trace.n_events == 3 and trace.done and trace.finish_reason == "stop"
    assert trace.model == "m" and trace.response_id == "x"
