"""A leaner transport: an ``asyncio.Protocol`` that parses every read where it lands.

:class:`AiohttpTransport` reads through aiohttp: each read goes into its stream reader,
and the streaming coroutine wakes up to take it out. Here the whole per-read path
runs synchronously inside ``data_received`` — one ``clock()`` timestamp, the HTTP
framing (``httptools``, the C parser uvicorn uses), :class:`SSEDecoder` and
:meth:`TraceBuilder.feed` — so no coroutine wakes up per read. The caller awaits one
future, resolved (or failed) by the protocol when the response ends.

The read loop itself is :class:`StreamState`, shared with every transport (SSE, trace,
first output, the time limits' bookkeeping, the end), and so is everything above it
(:func:`status_error`, which headers are kept), so the transports produce the same traces
and raise the same errors. Connections come
from a :class:`ConnectionPool` of HTTP/1.1 kept-alive connections.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import httptools
import msgspec
from multidict import CIMultiDict

from agentflow._errors import ConfigError, ConnectError, StreamInterrupted, StreamProtocolError
from agentflow._trace import TurnTrace
from agentflow.transport import _kstamp
from agentflow.transport._pool import ConnectionPool, PooledConnection
from agentflow.transport._request import ChatRequest, Endpoint, Timeouts
from agentflow.transport._shared import (
    MAX_ERROR_BODY,
    EndpointTransport,
    content_type_error,
    keep_headers,
    refused_content_type,
    status_error,
)
from agentflow.transport._sse import DEFAULT_MAX_EVENT_BYTES
from agentflow.transport._stream import StreamState, open_stream
from agentflow.typing import Clock, DeltaSink

__all__ = ["HTTPTransport"]

_encode = msgspec.json.encode
# Framing and encoding headers are the transport's to set: the body length is its own,
# and it cannot decode a compressed body, so it always asks for none.
_OWN_HEADERS = frozenset({"content-length", "transfer-encoding", "accept-encoding", "connection"})
#: Clocks a kernel stamp can be converted to (it is placed by its age in real time).
_REAL_CLOCKS = (time.perf_counter_ns, time.monotonic_ns)


class HTTPTransport(EndpointTransport):
    """Streams chat completions from one endpoint over raw asyncio and httptools.

    A drop-in alternative to :class:`AiohttpTransport` (same arguments, traces and errors)
    that does all per-read work inside the socket's ``data_received`` callback.

    Args:
        endpoint: an :class:`Endpoint` or a base URL.
        timeouts: connect, first-token, idle and total limits.
        connect_retries: how many times a request that got *no response byte* is resent
            on a new connection (llama.cpp's server drops some kept-alive connections
            after a stream; such a resend cannot duplicate output the client saw).
        ssl: the TLS context for an https endpoint (default: the system's trust store).
        keepalive_s: idle connections are closed after this many seconds.
        clock: nanosecond monotonic clock for the trace.
        kernel_timestamps: stamp each read with the time the kernel received it
            (``SO_TIMESTAMPNS``) instead of the time the event loop got to it, so a busy
            client does not inflate the latencies it measures (``docs/metrics.md``).
            ``None`` (the default): on where it works — Linux, ``http://``, and a real
            ``clock`` (``time.perf_counter_ns`` or ``time.monotonic_ns``; an injected
            or virtual clock keeps the loop's stamps); ``True`` insists (a
            :class:`ConfigError` where it cannot work); ``False``: asyncio's own
            transports. With kernel stamps ``clock`` must tick in real nanoseconds.
        max_event_bytes: the longest SSE event accepted (default 4 MiB); a server that
            sends a longer one, or never ends one, gets a :class:`StreamProtocolError`
            naming this limit once that many bytes are held.

    A 2xx answer declared as HTML, XML or JSON is an :class:`UnexpectedContentType`
    (quoting the body's first bytes), not parsed as a stream.
    """

    def __init__(
        self,
        endpoint: Endpoint | str,
        *,
        timeouts: Timeouts | None = None,
        connect_retries: int = 2,
        ssl: _ssl.SSLContext | None = None,
        keepalive_s: float = 15.0,
        clock: Clock = time.perf_counter_ns,
        kernel_timestamps: bool | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        super().__init__(
            endpoint,
            timeouts=timeouts,
            connect_retries=connect_retries,
            clock=clock,
            max_event_bytes=max_event_bytes,
        )
        self._keepalive_s = keepalive_s
        url = urlsplit(self._endpoint.chat_url)
        self._https = url.scheme == "https"
        if kernel_timestamps and not _kstamp.SUPPORTED:
            raise ConfigError(
                f"HTTPTransport kernel_timestamps=True needs Linux (SO_TIMESTAMPNS); "
                f"this is {sys.platform}"
            )
        if kernel_timestamps and self._https:
            raise ConfigError(
                "HTTPTransport kernel_timestamps=True works on http:// endpoints only "
                f"(TLS needs asyncio's own transport), got {self._endpoint.base_url!r}"
            )
        #: Whether reads are stamped by the kernel (see ``kernel_timestamps``).
        self.kernel_timestamps = (
            kernel_timestamps
            if kernel_timestamps is not None
            else _kstamp.SUPPORTED and not self._https and clock in _REAL_CLOCKS
        )
        try:
            port = url.port
        except ValueError as exc:
            raise ConfigError(f"Endpoint.base_url has a bad port: {exc}") from None
        default_port = 443 if self._https else 80
        self._host = url.hostname or ""
        self._port = port or default_port
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if self._port == default_port else f"{host}:{self._port}"
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        self._request_line = f"POST {target} HTTP/1.1\r\n"
        self._ssl = ssl
        self._pool: ConnectionPool[_Connection] | None = None

    @property
    def pool(self) -> ConnectionPool[_Connection] | None:
        """The connection pool (``None`` before the first request)."""
        return self._pool

    def _get_pool(self) -> ConnectionPool[_Connection]:
        pool = self._pool
        # Connections belong to the event loop that opened them; a transport reused
        # under a new loop (a second asyncio.run) starts a new pool.
        if pool is None or pool.loop is not asyncio.get_running_loop():
            ctx = None
            if self._https:
                ctx = self._ssl = self._ssl or _ssl.create_default_context()
            pool = self._pool = ConnectionPool(
                _Connection,
                self._host,
                self._port,
                endpoint=self.endpoint,
                ssl=ctx,
                server_hostname=self._host,
                connect_timeout=self._timeouts.connect,
                keepalive_s=self._keepalive_s,
                stamp_clock=self._clock if self.kernel_timestamps else None,
            )
        return pool

    def _encode_request(self, request: ChatRequest) -> bytes:
        """The request head and body, as one write."""
        ep = self._endpoint
        body = _encode(request.body(ep.extra_body))
        headers = ep.request_headers(request.headers)
        names = {k.lower() for k in headers}
        lines = [self._request_line]
        if "host" not in names:
            lines.append(f"Host: {self._host_header}\r\n")
        if "user-agent" not in names:
            lines.append("User-Agent: agentflow\r\n")
        for name, value in headers.items():
            if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                # A line break would let a header value smuggle in headers of its own.
                raise ConfigError(f"header {name!r} contains a line break")
            if name.lower() not in _OWN_HEADERS:
                lines.append(f"{name}: {value}\r\n")
        lines.append(f"Accept-Encoding: identity\r\nContent-Length: {len(body)}\r\n\r\n")
        return "".join(lines).encode() + body

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        """Stream one request to its end; see :class:`agentflow.typing.Transport`."""
        payload = self._encode_request(request)
        return await self._resending(lambda n: self._stream_once(payload, sink, n))

    async def _stream_once(
        self, payload: bytes, sink: DeltaSink | None, reconnects: int
    ) -> TurnTrace:
        st, limits = open_stream(self, sink, reconnects)
        pool = self._get_pool()
        try:
            async with limits.scope():
                conn = await pool.acquire()
                # The connection goes back to the pool only after a clean end of body on
                # a kept-alive connection; an error or a cancellation closes it.
                clean = False
                try:
                    ex = conn.start(payload, st)
                    await ex.done
                    # Unlike AiohttpTransport, a connection that carried a whole error body
                    # is kept too: a burst of 429s need not cost a burst of reconnects.
                    clean = ex.keep
                    if ex.status >= 300:
                        raise await status_error(
                            ex.status, ex.headers, _given(b"".join(ex.error_parts)), self.endpoint
                        )
                    if ex.refused is not None:
                        raise content_type_error(
                            ex.status, ex.refused, b"".join(ex.error_parts), self.endpoint
                        )
                finally:
                    limits.cancel()
                    if clean:
                        pool.release(conn)
                    else:
                        conn.abort()
                trace = st.finish(keep_headers(ex.headers))
        except TimeoutError:
            raise st.timeout() from None
        return trace

    async def aclose(self) -> None:
        """Close every pooled connection. Safe to call twice."""
        pool, self._pool = self._pool, None
        if pool is not None and pool.loop is asyncio.get_running_loop():
            await pool.aclose()


async def _given(body: bytes) -> bytes:
    """``status_error`` awaits the error body; here it has already been read."""
    return body


class _Exchange:
    """One request on one connection: where its reads go and what its caller awaits."""

    __slots__ = (
        "complete",
        "done",
        "error_parts",
        "error_size",
        "framed",
        "headers",
        "informational",
        "keep",
        "n_pieces",
        "raw_headers",
        "read",
        "refused",
        "sse",
        "status",
        "stream",
    )

    def __init__(self, done: asyncio.Future[None], stream: StreamState) -> None:
        #: Resolved when the response has ended (``status`` says how), failed otherwise.
        self.done = done
        #: The body's read loop: SSE, trace, first output, idle bookkeeping.
        self.stream = stream
        self.read = stream.read
        self.status = 0  # of the final response, once its head is complete
        self.sse = False  # a 2xx whose body is parsed as an event stream
        self.refused: str | None = None  # the content type of a 2xx that is not a stream
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.informational = False  # inside a 1xx response, which precedes the real one
        self.framed = True  # body delimited by chunks or a length, not by the close
        self.complete = False
        self.n_pieces = 0  # body pieces of the read that belong to this response
        self.keep = True  # the connection may be reused afterwards
        self.error_parts: list[bytes] = []
        self.error_size = 0


class _Connection(PooledConnection):
    """One HTTP/1.1 connection; while a request is on it, each read is parsed on arrival."""

    __slots__ = ("_ex", "_now", "_parser", "_pieces", "on_body")

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        super().__init__(pool)
        self._ex: _Exchange | None = None
        self._now = 0
        self._pieces: list[bytes] = []
        # httptools looks its callbacks up once, here. With on_body bound to list.append
        # each body piece (one per chunked frame) costs a C call, no Python frame; the
        # pieces of one read are then split into SSE events together.
        self.on_body = self._pieces.append
        self._parser = httptools.HttpResponseParser(self)

    def start(self, request: bytes, stream: StreamState) -> _Exchange:
        """Send ``request``; the body that follows feeds ``stream`` until the response ends."""
        ex = self._ex = _Exchange(self.pool.loop.create_future(), stream)
        self._pieces.clear()
        tr = self.transport
        if tr is None or tr.is_closing():
            self._settle(ex, self._dropped(ex, None))
        else:
            tr.write(request)
        return ex

    # -- asyncio.Protocol: the per-read path ---------------------------------------------

    def data_received(self, data: bytes) -> None:
        """asyncio: one read. Parse it to the end, synchronously, with one timestamp."""
        ex = self._ex
        if ex is None:
            # Bytes with no request on the connection (a server's parting "408", say):
            # whatever it is, the connection is out of step and cannot be reused.
            self.abort()
            return
        # rx_ns: the kernel's arrival stamp, when the connection has one (kernel_timestamps).
        self._now = now = self.rx_ns or ex.stream.clock()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if not ex.complete:
                self._fail(ex, self._invalid(ex, exc, now))
                return
            ex.keep = False  # junk after a complete response: keep the response, not the line
        pieces = self._pieces
        if ex.complete:
            del pieces[ex.n_pieces :]  # anything later belongs to no request of ours
        if pieces:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            if ex.sse:
                try:
                    ex.read(body, now)
                except Exception as exc:  # the stream's protocol/server errors, a sink's own
                    self._fail(ex, exc)
                    return
            elif self._add_error_body(ex, body, now):
                return
        if ex.complete:
            self._finish(ex, now)

    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio: the socket closed. Mid-request, that ends the request one way or another."""
        super().connection_lost(exc)
        ex = self._ex
        if ex is None:
            return
        if ex.status and not ex.framed:
            ex.keep = False  # a body delimited by the close has just ended: this is success
            self._finish(ex, ex.stream.clock())
        else:
            self._settle(ex, self._dropped(ex, exc))

    def abort(self) -> None:
        """Close at once; a request still on the connection is abandoned, not failed."""
        self._ex = None
        super().abort()

    # -- httptools callbacks (once per response, not per read) --------------------------

    def on_message_begin(self) -> None:
        """httptools: a response starts. A second one after ours is junk."""
        ex = self._ex
        if ex is not None and ex.complete:
            ex.keep = False

    def on_header(self, name: bytes, value: bytes) -> None:
        """httptools: one response header."""
        ex = self._ex
        if ex is not None and not ex.complete:
            ex.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        """httptools: the response head is complete."""
        ex = self._ex
        if ex is None or ex.complete:
            return
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the real response follows
            ex.informational = True
            ex.raw_headers.clear()
            return
        ex.status = status
        # As aiohttp decodes them, so both transports report the same header values.
        headers = ex.headers = CIMultiDict(
            (n.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
            for n, v in ex.raw_headers
        )
        ex.refused = refused_content_type(status, headers)
        ex.sse = status < 300 and ex.refused is None
        ex.framed = (
            "chunked" in headers.get("Transfer-Encoding", "").lower()
            or "Content-Length" in headers
            or status in (204, 304)
        )
        ex.stream.headers_at(self._now)

    def on_message_complete(self) -> None:
        """httptools: the response body is complete (its pieces are still to be parsed)."""
        ex = self._ex
        if ex is None or ex.complete:
            return
        if ex.informational:
            ex.informational = False
            return
        ex.complete = True
        ex.n_pieces = len(self._pieces)
        # Asked here: llhttp clears the flags it answers from once this callback returns.
        ex.keep = ex.keep and self._parser.should_keep_alive()

    # -- ends of an exchange -------------------------------------------------------------

    def _add_error_body(self, ex: _Exchange, body: bytes, now: int) -> bool:
        """Keep up to 64 KiB of a body that is not a stream (a non-2xx, or a 2xx page
        or document); at the cap, end the exchange (True)."""
        room = MAX_ERROR_BODY - ex.error_size
        if len(body) < room:
            ex.error_parts.append(body)
            ex.error_size += len(body)
            return False
        ex.error_parts.append(body[:room])
        ex.error_size = MAX_ERROR_BODY
        if not ex.complete:
            ex.keep = False  # the rest is left unread
            ex.complete = True
        self._finish(ex, now)
        return True

    def _finish(self, ex: _Exchange, now: int) -> None:
        """The response ended cleanly: flush the last event, wake the caller."""
        if ex.sse:
            try:
                ex.stream.end(now)  # a last event with no blank line after it
            except Exception as exc:
                self._fail(ex, exc)
                return
        self._ex = None
        if not ex.done.done():
            ex.done.set_result(None)

    def _fail(self, ex: _Exchange, exc: BaseException) -> None:
        """The request failed on this connection: fail the caller, close the connection."""
        self._settle(ex, exc)
        self.abort()

    def _settle(self, ex: _Exchange, exc: BaseException) -> None:
        if self._ex is ex:
            self._ex = None
        # A cancelled caller has already gone (and closed the connection).
        if not ex.done.done():
            ex.done.set_exception(exc)

    def _dropped(self, ex: _Exchange, exc: BaseException | None) -> Exception:
        """The error for a connection that closed during the request."""
        st = ex.stream
        endpoint = st.endpoint
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "the server closed it"
        if not ex.status:
            # No response head yet: the server cannot have answered, resending is safe.
            err: Exception = ConnectError(f"no response from {endpoint}: {why}", endpoint=endpoint)
        else:
            err = StreamInterrupted(
                f"connection to {endpoint} dropped mid-stream after "
                f"{st.n_chunks} output chunks: {why}",
                endpoint=endpoint,
                trace=st.partial(),
            )
        err.__cause__ = exc
        return err

    def _invalid(self, ex: _Exchange, exc: Exception, now: int) -> StreamProtocolError:
        """The error for bytes that are not HTTP/1.1 (a bad status line, chunk size, …)."""
        st = ex.stream
        endpoint = st.endpoint
        err = StreamProtocolError(
            f"{endpoint} sent an invalid HTTP response after "
            f"{st.n_chunks} output chunks: {type(exc).__name__}: {exc}",
            endpoint=endpoint,
            trace=st.partial(now),
        )
        err.__cause__ = exc
        return err
