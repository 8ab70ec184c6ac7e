"""What :class:`HTTPTransport` accepts outside a response body: the head and the trailers
are bounded, and what they say about the body is checked before it is read.

A raw loopback server writes exact bytes (``rawserver``); each test names what the old
behaviour was.
"""

from __future__ import annotations

import asyncio
import gzip
from contextlib import aclosing

import msgspec
import pytest

from agentflow import RateLimitError, StreamInterrupted, StreamProtocolError
from agentflow.transport._h1 import MAX_HEAD_BYTES, MAX_HEADER_LINE

from .rawserver import KINDS, SSE_BODY, TINY_REQUEST, chunk, make_transport, raw_server

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"


async def _stream(writes: list[bytes]) -> object:
    """Stream once from a server that answers with ``writes`` (each written and drained
    on its own); the outcome, a trace or a :class:`StreamProtocolError`."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for piece in writes:
                writer.write(piece)
                await writer.drain()
        except ConnectionError:
            pass  # the client left

    async with raw_server(serve) as srv:
        t = make_transport("protocol", srv.base_url, connect_retries=0)
        try:
            outcome: object = await t.stream(TINY_REQUEST)
        except StreamProtocolError as exc:
            outcome = exc
        finally:
            await t.aclose()
    return outcome


def _refused(outcome: object, limit: int) -> StreamProtocolError:
    assert isinstance(outcome, StreamProtocolError), outcome
    assert f"{limit}-byte limit" in str(outcome)
    assert outcome.endpoint is not None and outcome.endpoint in str(outcome)
    assert outcome.trace is not None and outcome.trace.n_events == 0
    return outcome


async def test_an_endless_head_is_refused_at_its_limit() -> None:
    """Header lines that never end were kept whole (1 MiB here, and read to the end)."""
    pad = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    outcome = await _stream([HEAD, *[pad] * 1024, b"\r\n", chunk(SSE_BODY), chunk(b"")])
    _refused(outcome, MAX_HEAD_BYTES)


async def test_a_header_value_that_never_ends_is_refused() -> None:
    """One 1 MiB header value, in 64 KiB reads: each read re-joined the whole value."""
    value = [b"a" * 65536] * 16
    outcome = await _stream([HEAD, b"X-Big: ", *value, b"\r\n\r\n", chunk(SSE_BODY), chunk(b"")])
    err = _refused(outcome, MAX_HEAD_BYTES)
    assert "response head" in str(err)


async def test_one_long_header_line_is_refused() -> None:
    """A whole head in one write, with one line over 8 KiB: aiohttp refuses it too."""
    line = b"X-Long: " + b"b" * MAX_HEADER_LINE + b"\r\n"
    outcome = await _stream([HEAD + line + b"\r\n" + chunk(SSE_BODY) + chunk(b"")])
    _refused(outcome, MAX_HEADER_LINE)


@pytest.mark.parametrize("writes", ["apart", "together"])
async def test_endless_trailers_are_refused(writes: str) -> None:
    """Trailers after the last chunk are bounded as a head is; the output before them is
    kept on the error, also when it came in the read that went over the limit. (A stream
    that ends with a finish reason but no ``[DONE]``: after ``[DONE]`` the answer is
    complete, and endless trailers only cost the connection — test_done_ends.py.)"""
    pad = b"X-Trailer: " + b"t" * 1000 + b"\r\n"
    body = HEAD + b"\r\n" + chunk(SSE_BODY.removesuffix(b"data: [DONE]\n\n")) + b"0\r\n"
    if writes == "apart":
        outcome = await _stream([body, *[pad] * 1024, b"\r\n"])
    else:
        outcome = await _stream([body + pad * 80 + b"\r\n"])
    assert isinstance(outcome, StreamProtocolError), outcome
    assert f"{MAX_HEAD_BYTES}-byte limit" in str(outcome) and "trailers" in str(outcome)
    assert outcome.trace is not None and outcome.trace.content == "fine"


async def test_heads_and_trailers_within_the_limits_are_read() -> None:
    """No false alarm: 40 headers of 1 KiB, a 100 Continue, and trailers, each in
    writes of their own."""
    pad = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    outcome = await _stream(
        [
            b"HTTP/1.1 100 Continue\r\n\r\n",
            HEAD,
            *[pad] * 40,
            b"\r\n",
            *[chunk(SSE_BODY[i : i + 50]) for i in range(0, len(SSE_BODY), 50)],
            b"0\r\n",
            *[b"X-T: " + b"t" * 500 + b"\r\n"] * 40,
            b"\r\n",
        ]
    )
    assert not isinstance(outcome, Exception), outcome
    assert outcome.content == "fine"  # type: ignore[attr-defined]


async def test_a_long_line_under_the_limit_is_kept() -> None:
    """A header line just under 8 KiB is an x-* header like any other."""
    size = MAX_HEADER_LINE - 100
    line = b"X-Long: " + b"c" * size + b"\r\n"
    outcome = await _stream([HEAD + line + b"\r\n" + chunk(SSE_BODY) + chunk(b"")])
    assert not isinstance(outcome, Exception), outcome
    assert outcome.response_headers["x-long"] == "c" * size  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", KINDS)
async def test_x_headers_are_text_and_joined_alike_on_every_transport(kind: str) -> None:
    """A Latin-1 header value (legal HTTP) was kept as 'caf\\udce9' by HTTPTransport and
    AiohttpTransport: no JSON encoder takes it, and the run store left the turn out. A
    repeated header kept its last value there, both joined by the openai SDK."""
    head = (
        HEAD + b"X-Req: one\r\nX-Req: two\r\nX-Latin: caf\xe9\r\n"
        b"X-Utf8: caf\xc3\xa9\r\nX-Api-Key: sekrit\r\n\r\n"
    )

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head + chunk(SSE_BODY) + chunk(b""))
        await writer.drain()

    async with raw_server(answer) as srv, aclosing(make_transport(kind, srv.base_url)) as t:
        trace = await t.stream(TINY_REQUEST)
    assert trace.response_headers == {
        "x-req": "one, two",
        "x-latin": "café",
        "x-utf8": "café",
        "x-api-key": "***",
    }
    assert msgspec.json.decode(msgspec.json.encode(trace)) is not None


async def test_a_compressed_stream_is_refused_by_its_encoding() -> None:
    """A gzip body (a proxy compressing, though the request asked for none) parsed to no
    event: 'ended after 0 events with neither a finish_reason nor [DONE]', retried as a
    stream cut mid-way. Now the error names the encoding; an error status keeps its class."""
    packed = gzip.compress(SSE_BODY)
    head = HEAD.replace(b"Transfer-Encoding: chunked\r\n", b"") + b"Content-Encoding: gzip\r\n"
    sized = head + b"Content-Length: %d\r\n\r\n" % len(packed) + packed
    outcome = await _stream([sized])
    assert isinstance(outcome, StreamProtocolError), outcome
    assert "Content-Encoding 'gzip'" in str(outcome) and not outcome.unfinished
    assert outcome.endpoint is not None and outcome.endpoint in str(outcome)
    limited = sized.replace(b"200 OK", b"429 Too Many Requests")
    with pytest.raises(RateLimitError):
        await _stream([limited])


async def test_an_over_long_head_on_the_openai_transport_is_stream_interrupted() -> None:
    """As docs/reliability.md says (it said ConnectError): the SDK reports the head its HTTP
    library refused as a connection error after the request went out."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + b"X-Big: " + b"a" * 200_000 + b"\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client leaves

    async with raw_server(answer) as srv, aclosing(make_transport("openai", srv.base_url)) as t:
        with pytest.raises(StreamInterrupted, match="may have received the request"):
            await t.stream(TINY_REQUEST)
