"""Which failed requests a transport sends again by itself, and on which connection.

A request is resent transparently only when it cannot have reached the server: its
connection could not be opened, or it went out on a *reused* kept-alive connection that
closed before any byte of an answer (the server had already closed it as idle). A new
connection that carried the request, or any byte of an answer, means the server may have
it — that is a :class:`StreamInterrupted`, for the retry policy to judge.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from agentflow import StreamInterrupted

from .rawserver import (
    KINDS,
    SSE_OK,
    TINY_REQUEST,
    KeepAliveAnswer,
    keepalive_server,
    make_transport,
)


def _first_ok_then(second: bytes) -> KeepAliveAnswer:
    """An answer: the first request is served (the connection kept), the second gets
    ``second`` and the connection closes, any later one is served again."""

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            writer.write(second)
            await writer.drain()
            await asyncio.sleep(0.01)  # the bytes go before the close, in reads of their own
            return False
        writer.write(SSE_OK)
        return True

    return answer


@pytest.mark.parametrize("kind", KINDS)
async def test_a_new_connection_that_carried_the_request_is_not_resent(kind: str) -> None:
    """The server read the request and closed (it may have crashed on it): sent once,
    StreamInterrupted with an empty trace — it used to be a ConnectError, resent
    connect_retries times, and 4 times that under the default RetryPolicy."""

    async def close_at_once(writer: asyncio.StreamWriter, n: int) -> bool:
        return False

    async with (
        keepalive_server(close_at_once) as srv,
        aclosing(make_transport(kind, srv.base_url)) as t,
    ):
        with pytest.raises(StreamInterrupted, match="may have received the request") as info:
            await t.stream(TINY_REQUEST)
    assert srv.requests == 1 and srv.connections == 1
    assert info.value.trace is not None and info.value.trace.n_events == 0
    assert info.value.endpoint == srv.base_url


@pytest.mark.parametrize("kind", ["protocol", "aiohttp"])
@pytest.mark.parametrize(
    "second",
    [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n", b"HTTP/1.1 2"],
    ids=["part-of-head", "part-of-status-line"],
)
async def test_part_of_an_answer_on_a_reused_connection_is_not_resent(
    kind: str, second: bytes
) -> None:
    """Bytes of an answer arrived, then the close: the server had the request."""
    async with (
        keepalive_server(_first_ok_then(second)) as srv,
        aclosing(make_transport(kind, srv.base_url)) as t,
    ):
        assert (await t.stream(TINY_REQUEST)).content == "fine"
        with pytest.raises(StreamInterrupted, match="may have received the request"):
            await t.stream(TINY_REQUEST)
    assert srv.requests == 2 and t.reconnects == 0


async def test_an_interim_answer_on_a_reused_connection_is_not_resent() -> None:
    """A ``100 Continue`` then the close (HTTPTransport: aiohttp does not report a 1xx)."""
    interim = _first_ok_then(b"HTTP/1.1 100 Continue\r\n\r\n")
    async with (
        keepalive_server(interim) as srv,
        aclosing(make_transport("protocol", srv.base_url)) as t,
    ):
        await t.stream(TINY_REQUEST)
        with pytest.raises(StreamInterrupted, match="unfinished response head"):
            await t.stream(TINY_REQUEST)
    assert srv.requests == 2 and t.reconnects == 0


@pytest.mark.parametrize("kind", ["protocol", "aiohttp"])
async def test_a_reused_connection_closed_before_any_byte_is_resent(kind: str) -> None:
    """The stale kept-alive connection (llama.cpp's quirk) is still resent, on a new one."""
    async with (
        keepalive_server(_first_ok_then(b"")) as srv,
        aclosing(make_transport(kind, srv.base_url)) as t,
    ):
        await t.stream(TINY_REQUEST)
        trace = await t.stream(TINY_REQUEST)
    assert trace.content == "fine" and trace.reconnects == 1 and t.reconnects == 1
    assert srv.requests == 3 and srv.connections == 2


@pytest.mark.parametrize("kind", ["protocol", "aiohttp"])
async def test_a_burst_of_stale_connections_costs_one_resend(kind: str) -> None:
    """Four idle connections went stale together (a restarted server behind a load
    balancer: each is reset at its next request). The resend goes on a new connection;
    it used to take the next stale one, and fail once connect_retries were spent."""
    stale: set[asyncio.StreamWriter] = set()
    seen: list[asyncio.StreamWriter] = []

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if writer in stale:
            writer.transport.abort()  # the server no longer knows this connection: RST
            return False
        seen.append(writer)
        await asyncio.sleep(0.01)  # the four first requests overlap: four connections
        writer.write(SSE_OK)
        return True

    async with keepalive_server(answer) as srv, aclosing(make_transport(kind, srv.base_url)) as t:
        await asyncio.gather(*[t.stream(TINY_REQUEST) for _ in range(4)])
        assert srv.connections == 4
        stale.update(seen)
        trace = await t.stream(TINY_REQUEST)
        assert trace.content == "fine" and trace.reconnects == 1
        if kind == "protocol":  # the connections idle for longer than the stale one: closed
            assert t.pool.size == 1 and t.pool.idle == 1
    assert srv.connections == 5
