"""A raw asyncio HTTP/1.1 server for the liveness and limit tests, and the three transports.

Each test writes the server's behaviour as a coroutine ``answer(reader, writer)`` that
gets the connection after one request has been read (so it may never answer, answer
with comments only, with a page, …). Being plain asyncio it runs on the test's loop —
on :class:`~agentflow.embedded.VirtualTimeLoop` too, where its ``asyncio.sleep`` calls
take virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from openai._base_client import get_platform

from agentflow import HTTPTransport
from agentflow.embedded import loop_clock
from agentflow.testing import Reply, sse_frames
from agentflow.transport import AiohttpTransport, ChatRequest, OpenAITransport

__all__ = [
    "KINDS",
    "SSE_BODY",
    "SSE_OK",
    "TINY_REQUEST",
    "KeepAliveAnswer",
    "RawServer",
    "chunk",
    "head",
    "keepalive_server",
    "make_transport",
    "raw_server",
    "self_signed",
]

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: ``(writer, n)`` answers the ``n``-th request (from 0, over all connections); it returns
#: whether the connection stays open for the next one.
KeepAliveAnswer = Callable[[asyncio.StreamWriter, int], Awaitable[bool]]

#: The three transports every limit must hold on.
KINDS = ["protocol", "aiohttp", "openai"]

#: A one-message request, and a whole 200 answer to it (an SSE body with a length).
TINY_REQUEST = ChatRequest(
    model="m", messages=[{"role": "user", "content": "hi"}], params={"max_tokens": 8}
)
#: The SSE body of a short text answer ("fine").
SSE_BODY = b"".join(Reply.text("fine").frames)
SSE_OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(SSE_BODY)
    + SSE_BODY
)


class RawServer:
    """Where a test's server listens, and what it received."""

    def __init__(self) -> None:
        self.port = 0
        #: Requests read (one per answer called).
        self.requests = 0
        #: Connections accepted.
        self.connections = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


async def _read_request(reader: asyncio.StreamReader) -> bool | None:
    """Read one request (head and Content-Length body); False at end of connection,
    ``None`` for a fleet's ``GET /props`` (its llama.cpp slot probe), which is no chat
    request: answered 404 as by a server that is not llama.cpp, and not counted."""
    try:
        head_bytes = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    if head_bytes.startswith(b"GET ") and head_bytes.split(b" ", 2)[1].endswith(b"/props"):
        return None
    length = 0
    for line in head_bytes.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    await reader.readexactly(length)
    return True


@contextlib.asynccontextmanager
async def raw_server(answer: Answer) -> AsyncIterator[RawServer]:
    """Serve on 127.0.0.1: read each request, then hand the connection to ``answer``."""
    srv = RawServer()
    tasks: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        srv.connections += 1
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            read = await _read_request(reader)
            if read is None:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            elif read:
                srv.requests += 1
                await answer(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    srv.port = server.sockets[0].getsockname()[1]
    try:
        yield srv
    finally:
        server.close()
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@contextlib.asynccontextmanager
async def keepalive_server(answer: KeepAliveAnswer) -> AsyncIterator[RawServer]:
    """Serve on 127.0.0.1, several requests per connection: each is read, then answered
    by ``answer(writer, n)``, until it returns False or the client closes."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # raw_server has read (and counted) the connection's first request.
        while await answer(writer, srv.requests - 1):
            await writer.drain()
            if not await _read_request(reader):
                return
            srv.requests += 1

    async with raw_server(on_connection) as srv:
        yield srv


def self_signed(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh self-signed cert for localhost, and a client that trusts it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


def head(content_type: str | None = "text/event-stream", status: int = 200) -> bytes:
    """A response head with chunked framing."""
    lines = [f"HTTP/1.1 {status} OK", "Transfer-Encoding: chunked"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def content(text: str | None, finish: str | None = None) -> bytes:
    """One SSE data event carrying ``text`` (``None``: no content, as a finish event)."""
    delta = {} if text is None else {"content": text}
    (frame,) = sse_frames(
        [{"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}], done=False
    )
    return frame


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (an empty ``data`` ends the body)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def make_transport(kind: str, base_url: str, **kw: Any) -> Any:
    """One of the three transports on ``base_url``, on the running loop's clock."""
    kw.setdefault("clock", loop_clock)
    if kind == "protocol":
        return HTTPTransport(base_url, **kw)
    if kind == "aiohttp":
        return AiohttpTransport(base_url, **kw)
    kw.pop("connect_retries", None)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    # The SDK looks its platform up in a worker thread on the first request; on the
    # virtual clock a thread takes no time, so the loop would jump to the next timer
    # (the idle limit) before the request was even sent. Look it up here instead.
    client._platform = get_platform()
    return OpenAITransport(client, owns_client=True, **kw)
