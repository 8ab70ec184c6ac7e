"""The default transport: aiohttp + msgspec, no SDK objects per chunk.

Per chunk it costs a few µs of CPU (``benchmarks/client_overhead.py``): a read
from aiohttp's stream buffer, one timestamp per read, the SSE split and one
msgspec decode per event. Connections are pooled without a limit of their own —
how many requests run at once is the fleet's decision, not the pool's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from agentflow._errors import (
    ConnectError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
)
from agentflow._trace import TurnTrace
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
from agentflow.transport._stream import finish_stream, open_stream
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
        connect_retries: how many times a request that got *no response byte* is resent
            on a new connection (llama.cpp's server drops some kept-alive connections
            after a stream; such a resend cannot duplicate output the client saw).
        session: an ``aiohttp.ClientSession`` to use; the transport then does not close it.
        clock: nanosecond monotonic clock for the trace.
        max_event_bytes: the longest SSE event accepted (default 4 MiB); a longer one is a
            :class:`StreamProtocolError` naming this limit.

    A 2xx answer declared as HTML, XML or JSON is an :class:`UnexpectedContentType`.
    """

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

    def _client(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            t = self._timeouts
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
                # Idle is watched by Deadlines (lazily), not by a per-read sock_read timer.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=t.connect),
                # A 1 MiB buffer keeps a fast stream from pausing and resuming the socket
                # once per chunk (aiohttp's 64 KiB default did, in the bulk benchmark).
                read_bufsize=2**20,
            )
            self._owns_session = True
        return self._session

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
                resp = await self._post(body, headers)
                # From here on the connection is returned to the pool only after a clean
                # end of body; an error or a cancellation closes it.
                clean = False
                try:
                    st.headers_at(clock())
                    if resp.status >= 300:
                        raise await status_error(
                            resp.status, resp.headers, _read_error_body(resp), self.endpoint
                        )
                    refused = refused_content_type(resp.status, resp.headers)
                    if refused is not None:
                        raise content_type_error(
                            resp.status, refused, await _read_error_body(resp), self.endpoint
                        )
                    await st.read_all(resp.content.iter_any())
                    clean = True
                finally:
                    limits.cancel()
                    if clean:
                        resp.release()
                    else:
                        resp.close()
                trace = st.finish(keep_headers(resp.headers))
        except TimeoutError:
            raise st.timeout() from None
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
            raise StreamInterrupted(
                f"connection to {self.endpoint} dropped mid-stream after "
                f"{st.n_chunks} output chunks: {type(exc).__name__}: {exc}",
                endpoint=self.endpoint,
                trace=st.partial(),
            ) from exc
        return trace

    async def _post(self, body: bytes, headers: dict[str, str]) -> aiohttp.ClientResponse:
        import aiohttp

        t = self._timeouts
        try:
            return await self._client().post(self._endpoint.chat_url, data=body, headers=headers)
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
        except (aiohttp.ClientConnectionError, OSError) as exc:
            raise ConnectError(
                f"no response from {self.endpoint}: {type(exc).__name__}: {exc}",
                endpoint=self.endpoint,
            ) from exc

    async def aclose(self) -> None:
        """Close the connection pool if this transport opened it."""
        if self._session is not None and self._owns_session and not self._session.closed:
            await self._session.close()


async def _read_error_body(resp: aiohttp.ClientResponse) -> bytes:
    """The whole error body (it may arrive in several reads), up to 64 KiB."""
    parts: list[bytes] = []
    size = 0
    while size < MAX_ERROR_BODY:
        part = await resp.content.read(MAX_ERROR_BODY - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)
