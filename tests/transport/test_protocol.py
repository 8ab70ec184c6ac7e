"""What only :class:`HTTPTransport` has: its connection pool, the HTTP framings it
reads itself, and parsing on the socket's callback.

The shared wire behaviour (stream shapes, errors, timeouts) is tested against both
transports in ``test_http.py``. Here a raw loopback server writes exact bytes and
counts the connections it accepted, so reuse can be checked from the server's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from agentflow import (
    ConfigError,
    Endpoint,
    HTTPTransport,
    RateLimitError,
    StreamInterrupted,
    StreamProtocolError,
    TurnTrace,
)
from agentflow.llamacpp import free_port
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import AiohttpTransport, ChatRequest, _kstamp
from agentflow.typing import DeltaKind

from ..wait import GUARD_S, eventually
from .rawserver import self_signed

REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], params={"max_tokens": 8})


@pytest.fixture(autouse=True, params=["asyncio", "kernel"])
def reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs twice: with ``kernel_timestamps=False`` (asyncio's transports)
    and ``True`` (agentflow's own socket transport, reads from ``recvmsg``)."""
    if request.param == "kernel" and not _kstamp.SUPPORTED:
        pytest.skip("kernel read timestamps need Linux")
    defaults = HTTPTransport.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "kernel_timestamps", request.param == "kernel")
    return str(request.param)


def sse(text: str) -> bytes:
    """A whole SSE body: role chunk, ``text`` in words, finish, usage, ``[DONE]``."""
    return b"".join(Reply.text(text).frames)


def chunked(body: bytes, *, head: bytes = b"", pieces: int = 1) -> list[bytes]:
    """A 200 response with a chunked body, as ``pieces`` separate writes."""
    size = -(-len(body) // pieces)
    frames = [body[i : i + size] for i in range(0, len(body), size)]
    writes = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n%stransfer-encoding: "
              b"chunked\r\n\r\n" % head]  # fmt: skip
    writes += [b"%x\r\n%s\r\n" % (len(f), f) for f in frames]
    writes.append(b"0\r\n\r\n")
    return writes


def sized(body: bytes, status: bytes = b"200 OK", head: bytes = b"") -> list[bytes]:
    """A response with a ``Content-Length`` body."""
    return [b"HTTP/1.1 %s\r\ncontent-length: %d\r\n%s\r\n" % (status, len(body), head), body]


@dataclass(frozen=True)
class Raw:
    """One scripted response: exact bytes, then what the server does with the connection.

    ``then``: "keep" — wait for the next request; "close" — close the connection;
    "wait" — send nothing more and wait until the client closes.
    """

    writes: Sequence[bytes]
    delay_s: float = 0.0
    then: Literal["keep", "close", "wait"] = "keep"


class RawServer:
    """A loopback HTTP/1.1 server that answers requests with scripted bytes."""

    def __init__(
        self, replies: Sequence[Raw] = (), *, tls: ssl.SSLContext | None = None, port: int = 0
    ) -> None:
        self.replies: deque[Raw] = deque(replies)
        self.tls = tls
        #: Connections accepted, and of those the ones the client closed.
        self.connections = 0
        self.client_closes = 0
        #: The raw head of every request received.
        self.heads: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = port

    @property
    def base_url(self) -> str:
        """With TLS, ``localhost``: the name the test certificate is for."""
        if self.tls is not None:
            return f"https://localhost:{self.port}/v1"
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def wait_for_closes(self, n: int) -> None:
        """Wait until the client has closed ``n`` connections."""
        await eventually(lambda: self.client_closes >= n, f"{n} client closes")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.client_closes += 1
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.heads.append(head)
                reply = self.replies.popleft() if self.replies else Raw(sized(b"{}", b"500 Oops"))
                for data in reply.writes:
                    writer.write(data)
                    await writer.drain()
                    if reply.delay_s:
                        await asyncio.sleep(reply.delay_s)
                if reply.then == "close":
                    return
                if reply.then == "wait":
                    with contextlib.suppress(ConnectionError):
                        await reader.read()
                    self.client_closes += 1
                    return
        except ConnectionError:
            self.client_closes += 1
        finally:
            writer.close()
            self._tasks.discard(task)


async def test_sequential_requests_reuse_one_connection() -> None:
    """Three requests in a row travel on one kept-alive connection."""
    replies = [Raw(chunked(sse(f"answer {i}"))) for i in range(3)]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        traces = [await t.stream(REQ) for _ in range(3)]
        assert t.pool is not None and t.pool.opened == 1 and t.pool.idle == 1
    assert [tr.content for tr in traces] == ["answer 0", "answer 1", "answer 2"]
    assert srv.connections == 1 and t.reconnects == 0


async def test_concurrent_requests_open_connections_then_reuse_them() -> None:
    """No pool limit: 4 streams at once open 4 connections; the next 4 reuse them."""
    replies = [Raw(chunked(sse(f"a{i} b"), pieces=3), delay_s=0.02) for i in range(8)]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        first = await asyncio.gather(*(t.stream(REQ) for _ in range(4)))
        second = await asyncio.gather(*(t.stream(REQ) for _ in range(4)))
    assert all(tr.done for tr in [*first, *second])
    assert srv.connections == 4


async def test_cancelled_stream_leaves_no_half_read_connection() -> None:
    """A stream cancelled mid-body closes its connection; the next request opens a new one."""
    replies = [
        Raw(chunked(sse("a b c d e f g h"), pieces=8), delay_s=0.05, then="wait"),
        Raw(chunked(sse("fresh"))),
    ]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        task = asyncio.create_task(t.stream(REQ))
        await eventually(lambda: srv.heads, "the request to reach the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert t.pool is not None and t.pool.idle == 0
        trace = await t.stream(REQ)
        await srv.wait_for_closes(1)
    assert trace.content == "fresh"
    assert srv.connections == 2 and srv.client_closes >= 1


async def test_content_length_body_and_reuse() -> None:
    """A body with Content-Length (no chunking) is read to its length; the connection stays."""
    replies = [Raw(sized(sse("sized body"), head=b"content-type: text/event-stream\r\n"))] * 2
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        traces = [await t.stream(REQ) for _ in range(2)]
    assert [tr.content for tr in traces] == ["sized body"] * 2
    assert srv.connections == 1


async def test_close_delimited_body_ends_at_close() -> None:
    """No length and no chunking: the body runs to the close, which is its clean end."""
    body = sse("until close")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
    replies = [
        Raw([head, body[:30], body[30:]], delay_s=0.01, then="close"),
        Raw(chunked(sse("x"))),
    ]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        first = await t.stream(REQ)
        second = await t.stream(REQ)
    assert first.content == "until close" and first.done and second.content == "x"
    assert srv.connections == 2 and t.reconnects == 0


async def test_connection_close_response_is_not_reused() -> None:
    """A response that says `Connection: close` is read whole, then its connection closed."""
    replies = [Raw(chunked(sse("bye"), head=b"connection: close\r\n")), Raw(chunked(sse("hi")))]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        traces = [await t.stream(REQ) for _ in range(2)]
    assert [tr.content for tr in traces] == ["bye", "hi"]
    assert srv.connections == 2 and t.reconnects == 0


async def test_dropped_reused_connection_is_resent_on_a_new_one() -> None:
    """llama.cpp's quirk on a *reused* connection: it reads the request and closes."""
    replies = [Raw(chunked(sse("one"))), Raw([], then="close"), Raw(chunked(sse("two")))]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        await t.stream(REQ)
        trace = await t.stream(REQ)
    assert trace.content == "two" and trace.reconnects == 1 and t.reconnects == 1
    assert srv.connections == 2 and len(srv.heads) == 3


async def test_drop_mid_body_keeps_partial_trace() -> None:
    """A Content-Length body cut short is StreamInterrupted with what arrived."""
    body = sse("a b c")
    end = body.index(b"\n\n", body.index(b'"a"')) + 2  # just after the first word
    cut = [b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body), body[:end]]
    async with RawServer([Raw(cut, then="close")]) as srv, HTTPTransport(srv.base_url) as t:
        with pytest.raises(StreamInterrupted) as info:
            await t.stream(REQ)
    assert info.value.trace is not None and info.value.trace.content == "a"


async def test_x_headers_are_kept_like_aiohttp() -> None:
    """`x-*` response headers land in the trace, lower-cased."""
    head = b"X-Request-ID: r1\r\nx-ratelimit-remaining: 9\r\nServer: raw\r\n"
    async with (
        RawServer([Raw(chunked(sse("h"), head=head))]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        trace = await t.stream(REQ)
    assert trace.response_headers == {"x-request-id": "r1", "x-ratelimit-remaining": "9"}


async def test_error_body_is_capped_and_its_connection_closed() -> None:
    """A huge error body is kept up to 64 KiB; the unread rest means no reuse."""
    big = b"e" * (200 * 1024)
    status = (
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    frames = [
        status,
        *(b"%x\r\n%s\r\n" % (8192, big[i : i + 8192]) for i in range(0, len(big), 8192)),
    ]
    replies = [Raw([*frames, b"0\r\n\r\n"], then="wait"), Raw(chunked(sse("ok")))]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        with pytest.raises(RateLimitError) as info:
            await t.stream(REQ)
        assert (await t.stream(REQ)).content == "ok"
    assert info.value.retry_after == 7.0 and info.value.body == "e" * (64 * 1024)
    assert srv.connections == 2


async def test_whole_error_body_keeps_the_connection() -> None:
    """Unlike the aiohttp transport, a wholly read error response does not cost a reconnect."""
    error = sized(b'{"error": {"message": "busy"}}', b"503 Service Unavailable")
    async with (
        RawServer([Raw(error), Raw(chunked(sse("ok")))]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        with pytest.raises(Exception, match="busy"):
            await t.stream(REQ)
        assert (await t.stream(REQ)).content == "ok"
    assert srv.connections == 1


async def test_invalid_http_is_a_protocol_error() -> None:
    """A bad status line, or bad chunk framing mid-body, is a StreamProtocolError."""
    framing = chunked(sse("a b c d"), pieces=2)
    framing[2] = b"zz\r\n"  # not a chunk size
    replies = [Raw([b"garbage\r\n\r\n"], then="wait"), Raw(framing, delay_s=0.02, then="wait")]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        with pytest.raises(StreamProtocolError, match="invalid HTTP"):
            await t.stream(REQ)
        with pytest.raises(StreamProtocolError) as info:
            await t.stream(REQ)
        await srv.wait_for_closes(2)
    assert info.value.trace is not None and info.value.trace.content.startswith("a")
    assert srv.client_closes == 2


async def test_invalid_status_line_is_a_protocol_error_with_aiohttp_too() -> None:
    """AiohttpTransport maps an unparseable response head to StreamProtocolError as well."""
    async with (
        RawServer([Raw([b"garbage\r\n\r\n"], then="wait")]) as srv,
        AiohttpTransport(srv.base_url) as t,
    ):
        with pytest.raises(StreamProtocolError, match="invalid HTTP"):
            await t.stream(REQ)


async def test_informational_response_is_skipped() -> None:
    """A `100 Continue` before the answer is skipped, as HTTP/1.1 says."""
    writes = [b"HTTP/1.1 100 Continue\r\n\r\n", *chunked(sse("after 100"))]
    async with RawServer([Raw(writes)]) as srv, HTTPTransport(srv.base_url) as t:
        trace = await t.stream(REQ)
    assert trace.content == "after 100"


async def test_connection_closed_while_idle_is_not_reused() -> None:
    """A server closing an idle kept-alive connection costs nothing: no resend is needed."""
    replies = [Raw(chunked(sse("one")), then="close"), Raw(chunked(sse("two")))]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        await t.stream(REQ)
        assert t.pool is not None
        # The close arrives while the connection is idle: the pool lets it go.
        await eventually(lambda: t.pool is not None and t.pool.size == 0, "the pool to drop it")
        trace = await t.stream(REQ)
    assert trace.content == "two" and t.reconnects == 0 and srv.connections == 2


async def test_bytes_on_an_idle_connection_close_it() -> None:
    """Unrequested bytes (a parting "408") on an idle connection: it is dropped, not reused."""
    late = sized(b"", b"408 Request Timeout")
    replies = [Raw([*chunked(sse("one")), *late], delay_s=0.02), Raw(chunked(sse("two")))]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        await t.stream(REQ)
        await eventually(lambda: t.pool is not None and t.pool.size == 0, "the pool to drop it")
        trace = await t.stream(REQ)
    assert trace.content == "two" and srv.connections == 2


async def test_junk_after_the_response_in_the_same_read() -> None:
    """A second, unrequested response glued to ours: ours is whole, the connection dropped."""
    junk = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    writes = chunked(sse("mine"))
    replies = [
        Raw([b"".join(writes[:-1]), writes[-1] + junk], delay_s=0.05),
        Raw(chunked(sse("two"))),
    ]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        first = await t.stream(REQ)
        second = await t.stream(REQ)
    assert (first.content, second.content) == ("mine", "two") and srv.connections == 2


async def test_idle_connections_expire() -> None:
    """Idle connections are closed after `keepalive_s`."""
    async with (
        RawServer([Raw(chunked(sse("one")))]) as srv,
        HTTPTransport(srv.base_url, keepalive_s=0.05) as t,
    ):
        await t.stream(REQ)
        await srv.wait_for_closes(1)
        assert t.pool is not None and t.pool.size == 0
    assert srv.client_closes == 1


async def test_aclose_closes_connections() -> None:
    """`aclose` leaves no connection open."""
    async with RawServer([Raw(chunked(sse("one")))] * 2) as srv:
        t = HTTPTransport(srv.base_url)
        await asyncio.gather(t.stream(REQ), t.stream(REQ))
        await t.aclose()
        await t.aclose()  # twice is fine
        await srv.wait_for_closes(2)
    assert srv.client_closes == 2


async def test_request_head() -> None:
    """Host with port, the body's length, identity encoding, and the endpoint's headers."""
    ep = Endpoint(base_url="http://127.0.0.1:1/v1", api_key="sk-x", headers={"X-Team": "a"})
    async with RawServer([Raw(chunked(sse("h")))]) as srv:
        ep = Endpoint(base_url=srv.base_url, api_key=ep.api_key, headers=ep.headers)
        async with HTTPTransport(ep) as t:
            await t.stream(REQ)
    head = srv.heads[0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{srv.port}\r\n" in head
    assert "Authorization: Bearer sk-x\r\n" in head and "X-Team: a\r\n" in head
    assert "Accept-Encoding: identity\r\n" in head and "Content-Length: " in head


async def test_header_with_a_line_break_is_refused() -> None:
    """A header value cannot smuggle in a header of its own."""
    bad = ChatRequest(model="m", messages=[], headers={"X-A": "1\r\nX-B: 2"})
    async with HTTPTransport("http://127.0.0.1:1/v1") as t:
        with pytest.raises(ConfigError, match="X-A"):
            await t.stream(bad)


class _TaskProbe:
    """A sink that records whether it was called from inside a task."""

    def __init__(self) -> None:
        self.in_task: list[bool] = []

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        self.in_task.append(asyncio.current_task() is not None)


async def test_reads_are_parsed_in_the_protocol_callback() -> None:
    """Deltas reach the sink from `data_received` itself: no task wakes up per read."""
    probe = _TaskProbe()
    async with (
        RawServer([Raw(chunked(sse("a b c"), pieces=5), delay_s=0.01)]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        trace = await t.stream(REQ, probe)
    assert trace.content == "a b c" and probe.in_task == [False, False, False]


class _Boom:
    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        raise LookupError("sink failed")


async def test_sink_error_fails_the_stream_and_closes_the_connection() -> None:
    """An exception from the sink reaches the caller, as with the aiohttp transport."""
    replies = [Raw(chunked(sse("a b")), then="wait"), Raw(chunked(sse("ok")))]
    async with RawServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        with pytest.raises(LookupError, match="sink failed"):
            await t.stream(REQ, _Boom())
        assert (await t.stream(REQ)).content == "ok"
    assert srv.connections == 2


def _same(a: TurnTrace, b: TurnTrace) -> None:
    """Everything but the timestamps."""
    for name in (
        "model", "response_id", "chunk_chars", "chunk_tokens", "tokens_exact", "n_events",
        "content", "reasoning", "tool_calls", "finish_reason", "usage", "done",
        "server_timings", "response_headers", "reconnects",
    ):  # fmt: skip
        assert getattr(a, name) == getattr(b, name), name
    assert len(a.chunk_ns) == len(b.chunk_ns)


async def test_same_traces_as_the_aiohttp_transport() -> None:
    """The same scripted replies give the same traces through both transports."""
    replies = [
        Reply.text("the quick brown fox", cached_tokens=3, headers={"X-Request-ID": "r"}),
        Reply.tool_call("lookup", {"city": "Paris"}),
        Reply(frames=[b'data: {"choices": [{"delta": {"reasoning_content": "hm"}}]}\n\n',
                      *Reply.text("ok").frames]),
    ]  # fmt: skip
    traces: dict[str, list[TurnTrace]] = {}
    for cls in (AiohttpTransport, HTTPTransport):
        async with ScriptedServer(replies) as srv, cls(srv.base_url) as t:
            traces[cls.__name__] = [await t.stream(REQ) for _ in replies]
    for a, b in zip(traces["AiohttpTransport"], traces["HTTPTransport"], strict=True):
        _same(a, b)


def test_a_transport_outlives_its_event_loop() -> None:
    """Used again under a new event loop, the transport opens a new pool."""
    port = free_port()
    t = HTTPTransport(f"http://127.0.0.1:{port}/v1")

    async def once() -> str:
        async with RawServer([Raw(chunked(sse("x")))], port=port):
            trace = await t.stream(REQ)
            await t.aclose()
            return trace.content

    assert asyncio.run(once()) == "x"
    assert asyncio.run(once()) == "x"


async def test_https(tmp_path: Path, reads: str) -> None:
    """TLS with the certificate checked against the URL's host name; connections reused."""
    if reads == "kernel":
        with pytest.raises(ConfigError, match="kernel_timestamps=True works on http://"):
            HTTPTransport("https://localhost:1/v1")
        return
    server_ctx, client_ctx = self_signed(tmp_path)
    replies = [Raw(chunked(sse("secure"))), Raw(chunked(sse("again")))]
    async with (
        RawServer(replies, tls=server_ctx) as srv,
        HTTPTransport(srv.base_url, ssl=client_ctx) as t,
    ):
        traces = [await t.stream(REQ) for _ in range(2)]
    assert [tr.content for tr in traces] == ["secure", "again"] and srv.connections == 1


class _ThreadServer:
    """A blocking loopback server on its own thread: it answers while the client's event
    loop is stuck, as a real server in another process would."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        #: Set after each answer has been written.
        self.answered = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self._sock.accept()
            with conn:
                buf = b""
                while True:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                    head, sep, rest = buf.partition(b"\r\n\r\n")
                    if not sep:
                        continue
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    if len(rest) < length:
                        continue
                    buf = rest[length:]
                    conn.sendall(self.response)
                    self.answered.set()

    def close(self) -> None:
        self._sock.close()
        self._thread.join(timeout=5)


async def test_kernel_stamps_do_not_count_the_clients_own_lag(reads: str) -> None:
    """The loop is stuck right after sending, until the answer has reached the client's
    socket: with kernel timestamps the answer is stamped when it reached the socket, before
    the loop came back; without them, when the loop read it, after. (Causality on one
    clock, not a duration: it holds however loaded the machine is — the loop used to be
    stuck for 50 ms after the server sent, and on a loaded machine the bytes reached the
    client's socket later than that.)"""
    srv = _ThreadServer(b"".join(chunked(sse("fast"))))
    unstuck: list[int] = []
    sock: list[int] = []

    def stuck() -> None:  # the client's own lag: a blocking call on the loop
        assert srv.answered.wait(GUARD_S), "the server never answered"
        readable, _, _ = select.select(sock, [], [], GUARD_S)
        assert readable, "the answer never reached the client's socket"
        unstuck.append(time.perf_counter_ns())

    try:
        async with HTTPTransport(f"http://127.0.0.1:{srv.port}/v1") as t:
            await t.stream(REQ)  # connects; the next request reuses the connection
            (conn,) = t._get_pool()._all
            assert conn.transport is not None
            sock.append(conn.transport.get_extra_info("socket").fileno())
            srv.answered.clear()
            # With an idle pooled connection stream() writes the request before its first
            # suspension, so this runs after the request is on its way.
            asyncio.get_running_loop().call_soon(stuck)
            trace = await t.stream(REQ)
    finally:
        srv.close()
    assert trace.content == "fast"
    if reads == "kernel":
        assert trace.chunk_ns[0] < unstuck[0]
    else:
        assert trace.chunk_ns[0] >= unstuck[0]


async def test_a_large_request_is_written_whole() -> None:
    """An 8 MB body does not fit the socket at once; the rest goes as the server reads it."""
    big = ChatRequest(model="m", messages=[{"role": "user", "content": "x" * 8_000_000}])
    async with (
        RawServer([Raw(chunked(sse("read it all")))]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        trace = await t.stream(big)
    assert trace.content == "read it all" and len(srv.heads) == 1


def test_kernel_stamps_need_linux(monkeypatch: pytest.MonkeyPatch, reads: str) -> None:
    """Elsewhere asking for them is a configuration error that says why."""
    monkeypatch.setattr(_kstamp, "SUPPORTED", False)
    with pytest.raises(ConfigError, match="needs Linux"):
        HTTPTransport("http://127.0.0.1:1/v1", kernel_timestamps=True)


def _fake_clock() -> int:
    return 0


@pytest.mark.parametrize(
    ("url", "supported", "clock", "on"),
    [
        ("http://127.0.0.1:1/v1", True, time.perf_counter_ns, True),
        ("http://127.0.0.1:1/v1", True, time.monotonic_ns, True),
        ("https://example.com/v1", True, time.perf_counter_ns, False),
        ("http://127.0.0.1:1/v1", False, time.perf_counter_ns, False),
        ("http://127.0.0.1:1/v1", True, _fake_clock, False),
    ],
)
def test_kernel_stamps_by_default_where_they_work(
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    supported: bool,
    clock: Callable[[], int],
    on: bool,
    reads: str,
) -> None:
    """Left to its default, a transport stamps reads in the kernel where it can (Linux,
    http://, a real clock) and falls back to asyncio's transports elsewhere, without an
    error; an injected clock (virtual time in tests) keeps the loop's stamps."""
    monkeypatch.setattr(_kstamp, "SUPPORTED", supported)
    defaults = HTTPTransport.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "kernel_timestamps", None)
    assert HTTPTransport(url, clock=clock).kernel_timestamps is on
