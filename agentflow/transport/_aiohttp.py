"""The default transport: aiohttp + msgspec, no SDK objects per chunk.

Per chunk it costs a few µs of CPU (``benchmarks/client_overhead.py``): a read
from aiohttp's stream buffer, one timestamp per read, the SSE split and one
msgspec decode per event. Connections are pooled without a limit of their own —
how many requests run at once is the fleet's decision, not the pool's.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow._errors import (
    ConnectError,
    StreamInterrupted,
    StreamPhase,
    StreamProtocolError,
    StreamTimeout,
)
from agentflow._trace import TurnTrace
from agentflow.transport._error_body import error_body_s, error_body_until
from agentflow.transport._request import ChatRequest, Endpoint, Timeouts
from agentflow.transport._shared import (
    MAX_ERROR_BODY,
    EndpointTransport,
    content_type_error,
    keep_headers,
    refused_content_type,
    sent_then_closed,
    status_error,
)
from agentflow.transport._sse import DEFAULT_MAX_EVENT_BYTES
from agentflow.transport._stream import StreamState, finish_stream, open_stream
from agentflow.typing import Clock, DeltaSink

if TYPE_CHECKING:
    import aiohttp  # imported when first used: `import agentflow` does not load it

__all__ = ["AiohttpTransport", "finish_stream", "status_error"]

_encode = msgspec.json.encode


class AiohttpTransport(EndpointTransport):
    """Streams chat completions from one endpoint over aiohttp.

    Args:
        endpoint: an :class:`Endpoint` or a base URL.
        timeouts: connect, first-token, idle and total limits.
        connect_retries: how many times a request that cannot have reached the server is
            resent: its connection could not be opened, or it went out on a reused
            kept-alive connection that closed before any response byte (llama.cpp's
            server drops some kept-alive connections after a stream). A new connection
            closed after carrying the request, or any response byte before the close,
            is a :class:`StreamInterrupted` instead, never resent here: the server may
            have received the request. (With a ``session`` of yours the transport cannot
            tell a reused connection from a new one: only a failure to connect is
            resent.)
        session: an ``aiohttp.ClientSession`` to use; the transport then does not close it.
            Its own ``ClientTimeout`` applies on top of ``timeouts`` — and aiohttp's default
            is ``total=300`` s for the whole request, the stream included: a longer answer
            is cut at 5 minutes. Pass ``aiohttp.ClientTimeout(total=None)`` to leave the
            limits to ``timeouts``. A timeout of the session's is a :class:`StreamTimeout`
            that names it (its ``total``: phase ``"total"``; its ``sock_read``: ``"idle"``).
        clock: nanosecond monotonic clock for the trace.
        max_event_bytes: the longest SSE event accepted (default 4 MiB); a longer one is a
            :class:`StreamProtocolError` naming this limit.

    A 2xx answer declared as HTML, XML or JSON is an :class:`UnexpectedContentType`.
    The sessions this transport makes belong to the event loop they were made on: used
    under a new loop (a second ``asyncio.run``) it makes new ones, dropping the old loop's
    idle connections (``aclose()`` before that loop ends closes them), as
    :class:`HTTPTransport` does with its pool. Used from a second loop while the first
    still runs (another thread's), :meth:`stream` raises :class:`ConfigError`: make one
    transport per event loop.

    It pickles (``Fleet(workers=N)`` sends each worker a copy) before or after it is
    used: the copy makes its own sessions where it runs — unless ``session`` is yours,
    which does not pickle.
    """

    _LOOP_BOUND = ("_bound_pid", "_fresh", "_loop")

    def __init__(
        self,
        endpoint: Endpoint | str,
        *,
        timeouts: Timeouts | None = None,
        connect_retries: int = 2,
        session: aiohttp.ClientSession | None = None,
        clock: Clock = time.perf_counter_ns,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        super().__init__(
            endpoint,
            timeouts=timeouts,
            connect_retries=connect_retries,
            clock=clock,
            max_event_bytes=max_event_bytes,
        )
        self._session = session
        self._owns_session = session is None
        # For resends: a new connection each (aiohttp cannot be told to skip its idle ones).
        self._fresh: aiohttp.ClientSession | None = None
        # The event loop the sessions this transport made belong to.
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self, *, fresh: bool = False) -> aiohttp.ClientSession:
        """The session to send with; ``fresh``: one that opens a new connection (a resend
        after a stale kept-alive connection: the other idle ones may be stale too)."""
        # Sessions belong to the event loop that made them; a transport reused under a
        # new loop (a second asyncio.run) makes new ones, as HTTPTransport's pool does.
        # One still running in another thread keeps them: ConfigError (closing its
        # connector from here stalled its streams until the idle limit, then resent them).
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._check_loop(self._loop):
                self._abandon()
            self._loop = loop
            self._bound_here()
        if self._session is None or self._session.closed:
            self._session = self._new_session(reuse=True)
            self._owns_session = True
        if not fresh or not self._owns_session:
            return self._session
        if self._fresh is None or self._fresh.closed:
            self._fresh = self._new_session(reuse=False)
        return self._fresh

    def _new_session(self, *, reuse: bool) -> aiohttp.ClientSession:
        import aiohttp

        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=not reuse),
            # Idle is watched by Deadlines (lazily), not by a per-read sock_read timer.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeouts.connect),
            # A 1 MiB buffer keeps a fast stream from pausing and resuming the socket
            # once per chunk (aiohttp's 64 KiB default did, in the bulk benchmark).
            read_bufsize=2**20,
            # Says whether a request went out on a reused connection, and when it was
            # written (a few calls per request, none per read).
            trace_configs=[_request_trace()],
        )

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        """Stream one request to its end; see :class:`agentflow.typing.Transport`."""
        ep = self._endpoint
        body = _encode(request.body(ep.extra_body))
        headers = ep.request_headers(request.headers)
        return await self._resending(lambda n: self._stream_once(body, headers, sink, n))

    async def _stream_once(
        self, body: bytes, headers: dict[str, str], sink: DeltaSink | None, reconnects: int
    ) -> TurnTrace:
        import aiohttp

        clock = self._clock
        st, limits = open_stream(self, sink, reconnects)
        try:
            async with limits.scope():
                resp = await self._post(body, headers, st, fresh=reconnects > 0)
                # From here on the connection is returned to the pool only after a clean
                # end of body; an error or a cancellation closes it.
                clean = False
                try:
                    st.headers_at(clock())
                    if resp.status >= 300:
                        # The status is the answer: its body gets a short while of its
                        # own, within the total and first-token limits; running out then
                        # gives the status with what came, not a StreamTimeout.
                        until = limits.until()
                        limits.met()
                        rest = _read_error_body(resp, (error_body_s(self._timeouts), until))
                        raise await status_error(resp.status, resp.headers, rest, self.endpoint)
                    refused = refused_content_type(resp.status, resp.headers)
                    if refused is not None:
                        raise content_type_error(
                            resp.status, refused, await _read_error_body(resp), self.endpoint
                        )
                    # After [DONE] the answer is complete; the connection is reused only
                    # if the body also ended (read_all drains it briefly).
                    clean = await st.read_all(resp.content.iter_any())
                finally:
                    limits.cancel()
                    if clean:
                        resp.release()
                    else:
                        resp.close()
                trace = st.finish(keep_headers(resp.headers))
        except TimeoutError as exc:
            if limits.ran_out:
                raise st.timeout() from None
            raise self._session_timeout(exc, st) from exc
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
            raise StreamInterrupted(
                f"connection to {self.endpoint} dropped mid-stream after "
                f"{st.n_chunks} output chunks: {type(exc).__name__}: {exc}",
                endpoint=self.endpoint,
                trace=st.partial(),
            ) from exc
        return trace

    async def _post(
        self, body: bytes, headers: dict[str, str], st: StreamState, *, fresh: bool
    ) -> aiohttp.ClientResponse:
        import aiohttp

        t = self._timeouts
        # Told by the session's trace (only a session this transport made has it) whether
        # the connection was reused, and when the request was written; with a session of
        # the user's, neither is known.
        attempt = _Attempt(st)
        try:
            return await self._client(fresh=fresh).post(
                self._endpoint.chat_url, data=body, headers=headers, trace_request_ctx=attempt
            )
        except aiohttp.ConnectionTimeoutError:
            raise StreamTimeout(
                f"{self.endpoint}: no connection within {t.connect} s (connect limit)",
                phase="connect",
                timeout_s=t.connect or 0.0,
                endpoint=self.endpoint,
            ) from None
        except aiohttp.ClientResponseError as exc:  # the response head was not valid HTTP
            raise StreamProtocolError(
                f"invalid HTTP response from {self.endpoint}: {exc.message}",
                endpoint=self.endpoint,
            ) from exc
        except aiohttp.ClientConnectorError as exc:  # no connection: nothing was sent
            raise self._connect_error(exc) from exc
        except TimeoutError as exc:  # a session of the user's: its ClientTimeout (ours has none)
            raise self._session_timeout(exc, st) from exc
        except (aiohttp.ClientConnectionError, OSError) as exc:
            # Only a reused kept-alive connection closed before an answer began (the server
            # had closed it as idle) is resent; on a new one the server may have received
            # the request: re-raised, a StreamInterrupted for the retry policy to judge.
            # (aiohttp does not say whether a 1xx came first: that is taken as no answer.)
            partial_head = isinstance(exc, aiohttp.ServerDisconnectedError) and not isinstance(
                exc.message, str
            )
            if attempt.reused and not partial_head:
                raise self._connect_error(exc) from exc
            state = "an unfinished response head" if partial_head else "no response byte"
            why = f"{type(exc).__name__}: {exc}"
            raise sent_then_closed(self.endpoint, state, why, st.partial()) from exc

    def _session_timeout(self, exc: TimeoutError, st: StreamState) -> StreamTimeout:
        """The error for a timeout of the aiohttp session's own ``ClientTimeout`` (a
        ``sock_read`` one, or its ``total`` — 300 s by aiohttp's default), not of
        agentflow's :class:`Timeouts`."""
        import aiohttp

        timeout = self._session.timeout if self._session is not None else None
        phase: StreamPhase
        if isinstance(exc, aiohttp.ServerTimeoutError):  # no byte within sock_read
            phase, part = "idle", "sock_read"
        else:
            phase, part = "total", "total"
        limit = getattr(timeout, part, None)
        seconds = float(limit) if isinstance(limit, int | float) else math.nan
        return StreamTimeout(
            f"{self.endpoint}: the aiohttp session's own timeout ran out "
            f"(ClientTimeout {part}={limit} s; agentflow's Timeouts did not)",
            phase=phase,
            timeout_s=seconds,
            endpoint=self.endpoint,
            trace=st.partial(),
        )

    def _connect_error(self, exc: BaseException) -> ConnectError:
        return ConnectError(
            f"no response from {self.endpoint}: {type(exc).__name__}: {exc}",
            endpoint=self.endpoint,
        )

    def _abandon(self) -> None:
        """Drop the sessions this transport made on another event loop (it has ended: they
        cannot be closed there, nor used here; or it is a parent process's). Their
        connectors are marked closed, so they are not reported as unclosed; their sockets
        go with the objects."""
        owned = [self._fresh]
        if self._owns_session:
            owned.append(self._session)
            self._session = None
        self._fresh = None
        forked = self._forked()
        for session in owned:
            if session is not None and not session.closed:
                connector = session.connector
                session.detach()
                if connector is None:
                    continue
                if forked:
                    # A forked child's copies of the parent's connections: closing them
                    # unregistered their sockets from the parent's epoll set too (shared
                    # across fork), its next request on one stalled. Only forgotten here
                    # (aiohttp's private books: an aiohttp without them, nothing closed).
                    books = ("_conns", "_acquired", "_cleanup_closed_transports")
                    held: list[Any] = [getattr(connector, name, None) for name in books]
                    if not all(hasattr(book, "clear") for book in held):
                        continue
                    for book in held:
                        book.clear()
                connector._close()  # the sync part of close(): no loop needed

    def __getstate__(self) -> dict[str, Any]:
        """As :meth:`EndpointTransport.__getstate__`; the session goes too if this
        transport made it (a ``session`` of yours stays, and does not pickle)."""
        state = super().__getstate__()
        if self._owns_session:
            state["_session"] = None
        return state

    async def aclose(self) -> None:
        """Close the connection pool if this transport opened it. Called on another
        event loop than the one using it while that one still runs (another thread's),
        it leaves the sessions to that loop's ``aclose``: they cannot be closed from here."""
        bound = self._loop
        if bound is not None and bound is not asyncio.get_running_loop():
            if self._loop_ended(bound):
                self._abandon()  # made on an earlier event loop (or process's)
            return
        if self._session is not None and self._owns_session and not self._session.closed:
            await self._session.close()
        if self._fresh is not None and not self._fresh.closed:
            await self._fresh.close()


class _Attempt:
    """One request's ``trace_request_ctx``: its stream, and whether it went out on a
    reused connection."""

    __slots__ = ("reused", "stream")

    def __init__(self, stream: StreamState) -> None:
        self.stream = stream
        self.reused = False


async def _on_reuse(_session: object, ctx: Any, _params: object) -> None:
    attempt = ctx.trace_request_ctx
    if isinstance(attempt, _Attempt):
        attempt.reused = True


async def _on_headers_sent(_session: object, ctx: Any, _params: object) -> None:
    attempt = ctx.trace_request_ctx
    if isinstance(attempt, _Attempt):  # connected: connecting is not the server's time
        st = attempt.stream
        st.sent_at(st.clock())


def _request_trace() -> aiohttp.TraceConfig:
    """A trace that tells a request's :class:`_Attempt` that its connection was reused,
    and when the request head was written (after connecting)."""
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_on_reuse)
    trace.on_request_headers_sent.append(_on_headers_sent)
    return trace


async def _read_error_body(
    resp: aiohttp.ClientResponse, bound: tuple[float, float | None] | None = None
) -> bytes:
    """The whole error body (it may arrive in several reads), up to 64 KiB.

    With ``bound`` (a status error's body: the longest wait for its next piece, and the
    loop time it must end by, if any; see ``error_body_until``), a body that is cut (a
    reset, fewer bytes than its ``Content-Length``), cannot be decoded, stalls or runs
    out of time gives what arrived of it: the status error is raised with its status and
    ``Retry-After`` all the same (see ``_error_body``)."""
    import aiohttp

    parts: list[bytes] = []
    size = 0
    try:
        while size < MAX_ERROR_BODY:
            async with asyncio.timeout_at(None if bound is None else error_body_until(*bound)):
                part = await resp.content.read(MAX_ERROR_BODY - size)
            if not part:
                break
            parts.append(part)
            size += len(part)
    except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError):
        if bound is None:
            raise
    return b"".join(parts)
