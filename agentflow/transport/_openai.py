"""A transport over a user's own ``openai.AsyncOpenAI`` client.

For users whose auth and configuration live in the SDK client (Azure, custom
``http_client``, organisation headers, proxies). The request goes out through the
client — its base URL, key, headers, timeouts and retries — but the response is
read as raw bytes through ``with_streaming_response`` and parsed by agentflow's own
SSE + msgspec path, so no pydantic model is built per chunk and the trace is the
same as :class:`HTTPTransport`'s. The response is always closed, on errors and on
cancellation too (the SDK keeps a pooled connection busy otherwise).

The same stream limits apply as on the other transports — ``Timeouts`` first-token,
idle (data events only) and total, the SSE event-size limit, the refusal of a 2xx
HTML/JSON body — except ``Timeouts.connect``: connecting (and the SDK's own timeouts and
retries before a response) is the client's business.

An error answer's body is read by the SDK; a response hook bounds it and keeps its status
(``_openai_body``), so a cut or stalled 429 is a ``RateLimitError`` here as elsewhere.

The trace's ``sent_ns`` is when the request is handed to the client: the SDK does not say
when it writes it, so its connecting (and its own retries) count in TTFT and E2E here, unlike
on the other transports.

The SDK is imported when a request is first streamed, not with agentflow: it brings
~100,000 objects that every full garbage collection of a fleet would then walk.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import time
from typing import TYPE_CHECKING

from agentflow._errors import (
    ConfigError,
    ConnectError,
    StreamInterrupted,
    StreamPhase,
    StreamTimeout,
)
from agentflow._redact import display_url, register_headers, register_secret, register_url
from agentflow._trace import TurnTrace
from agentflow.transport._error_body import error_body_s
from agentflow.transport._openai_body import ErrorHead, hook_error_bodies, unwatch, watch
from agentflow.transport._request import ChatRequest, Timeouts
from agentflow.transport._shared import (
    MAX_ERROR_BODY,
    content_type_error,
    keep_headers,
    refused_content_type,
    sent_then_closed,
    status_error,
)
from agentflow.transport._sse import DEFAULT_MAX_EVENT_BYTES, check_max_event_bytes
from agentflow.transport._stream import open_stream
from agentflow.typing import Clock, DeltaSink

if TYPE_CHECKING:
    from collections.abc import Awaitable

    import httpx2
    import openai

__all__ = ["OpenAITransport"]


class OpenAITransport:
    """Streams through ``client.chat.completions.with_streaming_response``.

    Args:
        client: the user's ``AsyncOpenAI`` (or ``AsyncAzureOpenAI``) client, openai ≥ 3.0;
            not closed by :meth:`aclose` unless ``owns_client`` is true. Its connections
            belong to the event loop it first ran on: under another loop (a second
            ``asyncio.run``) its kept-alive connections fail (httpx's ``RuntimeError: Event
            loop is closed``), so give each loop a client — and a transport — of its own
            (HTTPTransport and AiohttpTransport remake their pools themselves).
        clock: nanosecond monotonic clock for the trace.
        timeouts: first-token, idle and total limits, applied on top of the client's own
            timeouts (``connect`` is ignored here: the client connects).
        max_event_bytes: the longest SSE event accepted (default 4 MiB).

    Raises:
        ConfigError: httpx2 is missing: the installed openai is older than 3.0 (the
            ``openai`` extra's floor), whose HTTP client was httpx.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        clock: Clock = time.perf_counter_ns,
        owns_client: bool = False,
        timeouts: Timeouts | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        if timeouts is not None and not isinstance(timeouts, Timeouts):
            raise ConfigError(f"OpenAITransport.timeouts must be a Timeouts, got {timeouts!r}")
        _require_httpx2()
        self._client = client
        self._clock = clock
        self._owns = owns_client
        # The client's credentials are masked wherever agentflow prints (its errors echo them).
        register_secret(getattr(client, "api_key", None), owner=self)
        register_headers(client.default_headers, owner=self)
        register_url(str(client.base_url), owner=self)
        self._timeouts = timeouts or Timeouts()
        self._hooked = False
        #: The longest SSE event accepted, in bytes.
        self.max_event_bytes = check_max_event_bytes(max_event_bytes, "OpenAITransport")

    @property
    def endpoint(self) -> str:
        """The client's base URL, without userinfo."""
        return display_url(str(self._client.base_url).rstrip("/"))

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        """Stream one request to its end; see :class:`agentflow.typing.Transport`."""
        import httpx2  # the user's client has imported both already
        import openai

        body = request.body()
        # The SDK's typed keyword arguments are bypassed on purpose: every field goes in
        # the body exactly as the aiohttp transport would send it.
        model, messages = body.pop("model"), body.pop("messages")
        body.pop("stream")
        # The caller's keys with include_usage (vLLM's continuous_usage_stats, say), as the
        # other transports send them.
        stream_options = body.pop("stream_options")
        clock = self._clock
        st, limits = open_stream(self, sink)
        create = self._client.chat.completions.with_streaming_response.create
        if not self._hooked:  # error bodies bounded, their status kept (_openai_body)
            hook_error_bodies(self._client)
            self._hooked = True
        head, watching = watch(error_body_s(self._timeouts))
        try:
            async with (
                limits.scope(),
                create(
                    model=model,
                    messages=messages,
                    stream=True,
                    stream_options=stream_options,
                    extra_body=body,
                    extra_headers=dict(request.headers),
                ) as response,
            ):
                st.headers_at(clock())
                raw = response.http_response
                refused = refused_content_type(raw.status_code, raw.headers)
                if refused is not None:
                    first = await _read_some(raw)
                    raise content_type_error(raw.status_code, refused, first, self.endpoint)
                # Up to [DONE], then a brief drain (as the SDK's own Stream): leaving this
                # block closes the response; httpx drops a connection whose body did not end.
                await st.read_all(raw.aiter_bytes())
                # The bytes: httpx reads the whole set as Latin-1 if one value is not UTF-8.
                headers = keep_headers(raw.headers.raw)
        except TimeoutError:
            if head.cut:  # (while the SDK read an error body: its status stands)
                raise await self._status(head) from None
            raise st.timeout() from None
        except openai.APIStatusError as exc:
            raise await status_error(
                exc.status_code, exc.response.headers, _body(exc), self.endpoint
            ) from None
        except openai.APITimeoutError as exc:  # before the response: which limit says why
            phase, part, limit = _sdk_timeout(self._client, exc.__cause__)
            raise StreamTimeout(
                f"the OpenAI client's {part} timeout of {limit:g} s ran out on {self.endpoint}",
                phase=phase,
                timeout_s=limit,
                endpoint=self.endpoint,
                trace=st.partial() if phase == "idle" else None,
            ) from None
        except openai.APIConnectionError as exc:
            unsent = httpx2.ConnectError | httpx2.ProxyError | httpx2.UnsupportedProtocol
            if isinstance(exc.__cause__, unsent):  # no connection: nothing was sent
                raise ConnectError(
                    f"no response from {self.endpoint}: {type(exc).__name__}: {exc}",
                    endpoint=self.endpoint,
                ) from exc
            # The request went out (the SDK does not say on which connection): the server
            # may have received it, and the retry policy judges.
            why = f"{type(exc).__name__}: {exc} ({type(exc.__cause__).__name__})"
            raise sent_then_closed(self.endpoint, "no response", why, st.partial()) from exc
        except httpx2.TimeoutException as exc:
            if head.cut:
                raise await self._status(head) from None
            raise StreamTimeout(
                f"read timeout mid-stream on {self.endpoint}",
                phase="idle",
                timeout_s=_sdk_timeout(self._client, exc)[2],
                endpoint=self.endpoint,
                trace=st.partial(),
            ) from None
        except httpx2.HTTPError as exc:
            if head.cut:
                raise await self._status(head) from exc
            raise StreamInterrupted(
                f"connection to {self.endpoint} dropped mid-stream: {type(exc).__name__}: {exc}",
                endpoint=self.endpoint,
                trace=st.partial(),
            ) from exc
        finally:
            unwatch(head, watching)
        return st.finish(headers)

    async def _status(self, head: ErrorHead) -> Exception:
        """The status error for an error answer whose body was cut, or did not end in
        time: its status and headers (``Retry-After``), with what arrived of its body."""
        return await status_error(head.status, head.headers, _given(head.body()), self.endpoint)

    async def aclose(self) -> None:
        """Close the client if this transport owns it."""
        if self._owns:
            await self._client.close()

    def __repr__(self) -> str:
        return f"OpenAITransport({self.endpoint!r})"


def _require_httpx2() -> None:
    """A :class:`ConfigError` unless httpx2 (openai 3's HTTP client, read here) is there.

    Looked up, not imported: an older openai (on httpx) would otherwise fail every
    session with a bare ``ModuleNotFoundError`` at its first stream.
    """
    try:
        found = importlib.util.find_spec("httpx2") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return
    try:
        from importlib.metadata import version

        installed = f"the installed openai is {version('openai')}"
    except ImportError:  # PackageNotFoundError too
        installed = "httpx2 is not installed"
    raise ConfigError(
        f"OpenAITransport needs openai>=3.0 (it reads responses through httpx2); {installed}: "
        "pip install -U 'agentflow[openai]'"
    )


async def _read_some(response: httpx2.Response) -> bytes:
    """Up to 64 KiB of a body that is not a stream, to quote in the error."""
    parts: list[bytes] = []
    size = 0
    async for part in response.aiter_bytes():
        parts.append(part)
        size += len(part)
        if size >= MAX_ERROR_BODY:
            break
    return b"".join(parts)[:MAX_ERROR_BODY]


async def _body_bytes(exc: openai.APIStatusError) -> bytes:
    """What the error quotes of the body: at most 64 KiB of it. (The SDK has read the
    whole body before it raised: docs/reliability.md, "Transport differences".)"""
    import httpx2

    try:
        return (await exc.response.aread())[:MAX_ERROR_BODY]
    except httpx2.HTTPError:
        return b""


async def _given(body: bytes) -> bytes:
    """``status_error`` awaits the error body; here it has already been read."""
    return body


def _body(exc: openai.APIStatusError) -> Awaitable[bytes]:
    return _body_bytes(exc)


def _sdk_timeout(client: openai.AsyncOpenAI, cause: object) -> tuple[StreamPhase, str, float]:
    """For an SDK timeout caused by ``cause`` (an httpx timeout): the phase, the timeout's
    part (``connect``, ``pool``, ``write``, ``read``) and its limit in seconds — as the
    request carried it, else as the client sets it; NaN if neither says (never 0)."""
    import httpx2

    phase: StreamPhase
    if isinstance(cause, httpx2.ConnectTimeout):
        phase, part = "connect", "connect"
    elif isinstance(cause, httpx2.PoolTimeout):  # no pooled connection came free
        phase, part = "connect", "pool"
    elif isinstance(cause, httpx2.WriteTimeout):  # the request could not be sent
        phase, part = "connect", "write"
    elif isinstance(cause, httpx2.ReadTimeout):  # no byte came
        phase, part = "idle", "read"
    else:
        phase, part = "total", "read"
    sent: object = None
    if isinstance(cause, httpx2.RequestError):
        with contextlib.suppress(RuntimeError):  # no request attached
            sent = cause.request.extensions.get("timeout")
    for value in (
        sent.get(part) if isinstance(sent, dict) else None,
        client.timeout,
        getattr(client.timeout, part, None),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return phase, part, float(value)
    return phase, part, math.nan
