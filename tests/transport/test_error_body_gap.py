"""An error body that keeps coming is read whole; only a stalled one is cut.

The wait for an error body (``ERROR_BODY_S``) is a gap since its last piece, restarted by
each piece, within the stream's ``total`` limit. It was a total from the head: a body
still arriving 10 s after its head was cut there — a context-length 400 split by a pause
became a plain ``BadRequestError``, a slow but complete 429 lost its message and its
keep-alive connection.

On the virtual clock (:func:`~agentflow.embedded.run_virtual`): the pauses cost nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from agentflow import (
    APIStatusError,
    ContextLengthExceeded,
    RateLimitError,
    ServerError,
    Timeouts,
    TransportError,
)
from agentflow.embedded import run_virtual
from agentflow.transport._error_body import ERROR_BODY_S

from .rawserver import KINDS, SSE_OK, TINY_REQUEST, keepalive_server, make_transport, raw_server

MESSAGE = b'{"error":{"message":"' + b"m" * 40 + b'"}}'
SLOW_429 = (
    b"HTTP/1.1 429 X\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(MESSAGE)
)
CONTEXT = (
    b'{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, '
    b'you requested 5000 tokens (4000 in the messages, 1000 in the completion)."}}'
)


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _error_of(kind: str, answer: Answer, timeouts: Timeouts) -> tuple[TransportError, float]:
    """The error of one request that ``answer`` serves, on the virtual clock, and the
    (virtual) seconds it took (an hour at most: a hang guard)."""

    async def main() -> tuple[TransportError, float]:
        loop = asyncio.get_running_loop()
        async with raw_server(answer) as srv:
            t = make_transport(kind, srv.base_url, timeouts=timeouts)
            start = loop.time()
            try:
                with pytest.raises(TransportError) as caught:
                    await asyncio.wait_for(t.stream(TINY_REQUEST), 3600)
            finally:
                await t.aclose()
            return caught.value, loop.time() - start

    return run_virtual(main())


@pytest.mark.parametrize("kind", KINDS)
def test_a_slow_complete_429_keeps_its_message_and_its_connection(kind: str) -> None:
    """Its body comes 5 bytes every 1.2 s: 12 s in all, more than ERROR_BODY_S."""

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n > 0:
            writer.write(SSE_OK)
            return True
        writer.write(SLOW_429)
        for i in range(0, len(MESSAGE), 5):
            await asyncio.sleep(1.2)
            writer.write(MESSAGE[i : i + 5])
            await writer.drain()
        return True

    async def main() -> tuple[TransportError, str, int]:
        async with keepalive_server(answer) as srv:
            t = make_transport(kind, srv.base_url, timeouts=Timeouts())
            try:
                with pytest.raises(TransportError) as caught:
                    await t.stream(TINY_REQUEST)
                ok = await asyncio.wait_for(t.stream(TINY_REQUEST), 30)
            finally:
                await t.aclose()
            return caught.value, ok.content, srv.connections

    assert 1.2 * len(MESSAGE) / 5 > ERROR_BODY_S
    err, content, connections = run_virtual(main())
    assert isinstance(err, RateLimitError) and err.retry_after == 1.0
    assert "m" * 40 in str(err)  # the whole message
    assert content == "fine"
    assert connections == 1  # the body ended: the connection was kept


@pytest.mark.parametrize("kind", KINDS)
def test_a_context_length_400_split_by_pauses_is_still_recognised(kind: str) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 400 Bad\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
        )
        for i in range(0, len(CONTEXT), 60):  # three pieces, 6 s apart: 12 s after the head
            await asyncio.sleep(6)
            writer.write(CONTEXT[i : i + 60])
            await writer.drain()
        writer.close()

    err, _ = _error_of(kind, answer, Timeouts())
    assert isinstance(err, ContextLengthExceeded), repr(err)


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_that_keeps_coming_is_still_cut_at_the_total_limit(kind: str) -> None:
    """A byte every 2 s, never ending: the status error at total=7, with what came."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 503 X\r\nRetry-After: 2\r\nContent-Length: 1000\r\n\r\nab")
        while True:
            await asyncio.sleep(2)
            writer.write(b"c")
            await writer.drain()

    err, took = _error_of(kind, answer, Timeouts(total=7.0))
    assert isinstance(err, ServerError) and isinstance(err, APIStatusError)
    assert err.retry_after == 2.0 and "abccc" in str(err)
    assert took == pytest.approx(7.0, abs=0.2)


@pytest.mark.parametrize("kind", KINDS)
def test_an_endless_error_body_is_cut_at_64_kib(kind: str) -> None:
    """With no total limit, a body that never stalls is still bounded: by its size."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 503 X\r\nRetry-After: 2\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            await asyncio.sleep(0.5)
            writer.write(b"400\r\n" + b"e" * 1024 + b"\r\n")
            await writer.drain()

    err, _ = _error_of(kind, answer, Timeouts(total=None))
    assert isinstance(err, ServerError) and err.retry_after == 2.0, repr(err)
