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
from a :class:`ConnectionPool` of HTTP/1.1 kept-alive connections; their protocol (the
per-read path: ``_Connection``) is in ``_h1.py``, the request on one (``Exchange``) in
``_exchange.py``.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
import sys
import time
from urllib.parse import urlsplit

import msgspec

from agentflow._errors import ConfigError, ConnectError
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow._trace import TurnTrace
from agentflow.transport import _kstamp
from agentflow.transport._h1 import _Connection as _Connection
from agentflow.transport._pool import ConnectionPool
from agentflow.transport._request import ChatRequest, Endpoint, Timeouts
from agentflow.transport._shared import (
    EndpointTransport,
    content_type_error,
    keep_headers,
    status_error,
)
from agentflow.transport._sse import DEFAULT_MAX_EVENT_BYTES
from agentflow.transport._stream import open_stream
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

    Its pool belongs to the event loop that opened it: used under a new loop (a second
    ``asyncio.run``) it opens a new one; used from a second loop while the first still
    runs (another thread's), :meth:`stream` raises :class:`ConfigError` — make one
    transport per event loop.

    It pickles (``Fleet(workers=N)`` sends each worker a copy) before or after it is
    used: the copy opens its own pool where it runs — unless ``ssl`` is a context of
    yours, which does not pickle.

    Args:
        endpoint: an :class:`Endpoint` or a base URL.
        timeouts: connect, first-token, idle and total limits.
        connect_retries: how many times a request that cannot have reached the server is
            resent: its connection could not be opened, or it went out on a reused
            kept-alive connection that closed before any response byte (llama.cpp's
            server drops some kept-alive connections after a stream). A new connection
            closed after carrying the request, or any response byte before the close,
            is a :class:`StreamInterrupted` instead, never resent here: the server may
            have received the request.
        ssl: the TLS context for an https endpoint (default: the system's trust store).
        keepalive_s: idle connections are closed after this many seconds: a finite number
            in [0.001, 1e9] (else a :class:`ConfigError`).
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

    _LOOP_BOUND = ("_bound_pid", "_pool", "_default_ssl")

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
        # Checked here: a str failed each session after its whole answer was read, and a
        # negative or NaN one silently closed every connection as soon as it went idle.
        self._keepalive_s = check_seconds(
            keepalive_s, "HTTPTransport keepalive_s", 0.001, MAX_TIMEOUT_S
        )
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
        default_port = 443 if self._https else 80
        self._host = url.hostname or ""
        self._port = url.port or default_port  # a valid one: Endpoint checked base_url
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if self._port == default_port else f"{host}:{self._port}"
        self._request_line = f"POST {url.path or '/'} HTTP/1.1\r\n"  # no query: Endpoint
        self._ssl = ssl
        # The system's default context, made at the first https request when ``ssl`` is
        # None (an SSLContext does not pickle: a copy makes its own).
        self._default_ssl: _ssl.SSLContext | None = None
        self._pool: ConnectionPool[_Connection] | None = None

    @property
    def pool(self) -> ConnectionPool[_Connection] | None:
        """The connection pool (``None`` before the first request)."""
        return self._pool

    def _get_pool(self) -> ConnectionPool[_Connection]:
        pool = self._pool
        # Connections belong to the event loop that opened them; a transport reused
        # under a new loop (a second asyncio.run) starts a new pool. One still running
        # in another thread keeps its pool: ConfigError (a second pool replacing it was
        # closed by neither loop's aclose, its sockets left open). A forked child drops
        # the parent's pool, never closing it: its sockets are the parent's.
        if pool is None or self._check_loop(pool.loop):
            ctx = None
            if self._https:
                ctx = self._ssl or self._default_ssl
                if ctx is None:
                    ctx = self._default_ssl = _ssl.create_default_context()
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
            self._bound_here()
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
                # A resend goes on a new connection: the idle ones may be as stale as the
                # one that failed (a restarted server, a NAT that forgot them).
                conn = await pool.acquire(fresh=reconnects > 0)
                # The connection goes back to the pool only after a clean end of body on
                # a kept-alive connection; an error or a cancellation closes it.
                clean = False
                try:
                    ex = conn.start(payload, st)
                    try:
                        await ex.done
                    except ConnectError:
                        if conn.reused:  # stale: so is every connection idle for longer
                            pool.drop_idle(since=conn.idle_since)
                        raise
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
        """Close every pooled connection. Safe to call twice. Called on another event
        loop than the pool's while that one still runs (another thread's), it leaves the
        pool to that loop's ``aclose``: its connections cannot be closed from here."""
        pool = self._pool
        if pool is None:
            return
        bound = pool.loop
        if bound is asyncio.get_running_loop():
            self._pool = None
            await pool.aclose()
        elif self._loop_ended(bound):
            self._pool = None  # opened on an earlier event loop (or process's): dropped


async def _given(body: bytes) -> bytes:
    """``status_error`` awaits the error body; here it has already been read."""
    return body
