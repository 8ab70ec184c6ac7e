"""An error object a server sends inside an open stream, on the three transports: the
class its code calls for (as an HTTP status would), the output that came before it,
and the endpoint in its message."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

import pytest

from agentflow import (
    APIStatusError,
    BadRequestError,
    ContextLengthExceeded,
    RateLimitError,
    ServerError,
)
from agentflow.sched import RetryPolicy

from .rawserver import KINDS, TINY_REQUEST, chunk, head, make_transport, raw_server

TOO_LONG = (
    "This model's maximum context length is 100 tokens. However, you requested 150 tokens "
    "(120 in the messages, 30 in the completion)."
)


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _stream_error(kind: str, error: Any) -> APIStatusError:
    """Stream from a server that sends one output chunk, then ``{"error": error}``."""
    delta = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"content": "partial"}}]}

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = _event(delta) + _event({"error": error})
        writer.write(head() + chunk(body) + chunk(b""))
        await writer.drain()

    async with raw_server(answer) as srv, aclosing(make_transport(kind, srv.base_url)) as t:
        with pytest.raises(APIStatusError) as info:
            await t.stream(TINY_REQUEST)
    err = info.value
    assert srv.base_url in str(err) and err.endpoint == srv.base_url
    assert "inside the stream after 1 output chunks" in str(err)
    assert err.trace is not None and err.trace.content == "partial"
    return err


@pytest.mark.parametrize("kind", KINDS)
async def test_a_429_in_the_stream_is_a_rate_limit_error(kind: str) -> None:
    """It was a ServerError, blamed on the replica, with no trace and no endpoint."""
    err = await _stream_error(kind, {"message": "Rate limit exceeded", "code": 429})
    assert type(err) is RateLimitError and err.status == 429
    assert RetryPolicy().retryable(err) and not RetryPolicy.blames_replica(err)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_too_long_prompt_in_the_stream_is_context_length_exceeded(kind: str) -> None:
    err = await _stream_error(kind, {"message": TOO_LONG, "type": "BadRequestError", "code": 400})
    assert isinstance(err, ContextLengthExceeded)
    assert (err.status, err.limit, err.tokens, err.prompt_tokens) == (400, 100, 150, 120)
    assert not RetryPolicy().retryable(err)


@pytest.mark.parametrize(
    ("error", "cls", "status"),
    [
        ({"message": "overloaded", "code": 503}, ServerError, 503),
        ({"message": "bad tool schema", "code": "400"}, BadRequestError, 400),
        ({"message": "boom"}, ServerError, 500),
        ({"message": TOO_LONG, "code": "context_length_exceeded"}, ContextLengthExceeded, 400),
        ("a bare string", ServerError, 500),
        ({"message": "odd", "code": "²"}, ServerError, 500),
    ],
    ids=["503", "string-code", "no-code", "too-long-without-status", "string", "unicode-digit"],
)
async def test_the_code_picks_the_class(error: Any, cls: type, status: int) -> None:
    err = await _stream_error("protocol", error)
    assert type(err) is cls and err.status == status


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ("http://u:pw0rd@127.0.0.1:9/v2/chat/completions?token=SECRETQ", "127.0.0.1:9/v2/chat/"),
        ("/v2/chat/completions", "/v2/chat/completions"),
    ],
    ids=["absolute", "relative"],
)
async def test_a_redirect_says_where_it_points(location: str, shown: str) -> None:
    """HTTPTransport does not follow redirects; its error said only 'answered 301: HTTP
    301'. It names the Location (made absolute, without credentials or query) and what
    to change."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 301 Moved Permanently\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n"
            % location.encode()
        )
        await writer.drain()

    async with raw_server(answer) as srv, aclosing(make_transport("protocol", srv.base_url)) as t:
        with pytest.raises(APIStatusError) as info:
            await t.stream(TINY_REQUEST)
    message = str(info.value)
    assert info.value.status == 301 and "base_url" in message
    if location.startswith("/"):
        assert f"127.0.0.1:{srv.port}{shown}" in message
    else:
        assert shown in message and "?…" in message
    assert "pw0rd" not in message and "SECRETQ" not in message


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), ("1.5", 1.5), ("inf", None), ("Infinity", None), ("1e400", None),
     ("1" * 400, None), ("1_0", None), ("nan", None), ("-5", None), ("١٢", None),
     ("Mon, 01 Jan 99999999999 00:00:00 GMT", None)],
)  # fmt: skip
async def test_retry_after_is_finite_or_none(value: str, seconds: float | None) -> None:
    """A 429's Retry-After read by float(): 'inf' or '1e400' gave retry_after=inf. An
    HTTP date whose year overflows a C int escaped as a bare OverflowError."""
    body = b'{"error": {"message": "slow down"}}'

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: %s\r\nContent-Length: %d\r\n\r\n"
            % (value.encode(), len(body))
            + body
        )
        await writer.drain()

    async with raw_server(answer) as srv, aclosing(make_transport("protocol", srv.base_url)) as t:
        with pytest.raises(RateLimitError) as info:
            await t.stream(TINY_REQUEST)
    assert info.value.retry_after == seconds
