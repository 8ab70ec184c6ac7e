"""A streamed reply whose body ends when the connection closes (no Content-Length, not
chunked: HTTP/1.0-style servers and proxies). A close in the middle of an event, or a
reset, is a cut stream — retried like one — not a complete reply: it used to be a
"malformed chunk" the default retry policy does not retry (the half event fed to the
parser as if it were the last), and ``HTTPTransport`` took a reset for the body's end."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

import pytest

from agentflow import RetryPolicy, StreamInterrupted, StreamProtocolError
from agentflow.transport import ChatRequest

from .rawserver import Answer, make_transport, raw_server

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
FIRST = b"data: " + json.dumps(
    {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"content": "Hello"}}]}
).encode() + b"\n\n"  # fmt: skip
HALF = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":" wo'


def _answer(end: str) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + FIRST + HALF)
        await writer.drain()
        if end == "reset":  # RST, not FIN
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    return answer


@pytest.mark.parametrize("kind", ["protocol", "aiohttp"])
@pytest.mark.parametrize("end", ["close", "reset"])
def test_a_close_delimited_stream_cut_mid_event_is_a_cut_stream(kind: str, end: str) -> None:
    async def main() -> BaseException:
        async with raw_server(_answer(end)) as srv:
            t = make_transport(kind, srv.base_url, connect_retries=0)
            try:
                with pytest.raises((StreamInterrupted, StreamProtocolError)) as info:
                    await t.stream(ChatRequest(model="m", messages=[]))
            finally:
                await t.aclose()
        return info.value

    err = asyncio.run(main())
    assert isinstance(err, StreamInterrupted | StreamProtocolError)
    if isinstance(err, StreamProtocolError):
        assert err.unfinished, err  # the end of the body cut the last event
    elif kind == "protocol":
        assert end == "reset"
    assert RetryPolicy().retryable(err)  # retried as a cut stream is
    assert err.trace is not None and err.trace.content == "Hello"  # what did arrive
