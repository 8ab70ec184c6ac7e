"""What every transport does the same way once a response is in: errors and the end of stream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Self

import msgspec

from agentflow._errors import (
    APIStatusError,
    BadRequestError,
    ConnectError,
    RateLimitError,
    ServerError,
    StreamProtocolError,
)
from agentflow._redact import display_url
from agentflow._trace import TurnTrace
from agentflow.transport._decode import TraceBuilder
from agentflow.transport._request import Endpoint, Timeouts, parse_retry_after
from agentflow.typing import Clock

__all__ = ["MAX_ERROR_BODY", "EndpointTransport", "finish_stream", "keep_headers", "status_error"]

#: The most of an error body any transport reads.
MAX_ERROR_BODY = 64 * 1024


class EndpointTransport:
    """What both HTTP transports share: one endpoint, its limits and clock, and the
    resending of a request that failed before any response byte.

    A plain loop, not tenacity: only such a failure (:class:`ConnectError`) is resent
    here — it cannot duplicate output the client saw; the retry *policy* lives above
    the transport.
    """

    def __init__(
        self, endpoint: Endpoint | str, *, timeouts: Timeouts | None, connect_retries: int,
        clock: Clock,
    ) -> None:  # fmt: skip
        self._endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint(base_url=endpoint)
        self._timeouts = timeouts or Timeouts()
        self._connect_retries = connect_retries
        self._clock = clock
        #: Requests resent because the connection failed before any response byte.
        self.reconnects = 0

    @property
    def endpoint(self) -> str:
        """The base URL requests go to, without userinfo (the label errors and traces use)."""
        return display_url(self._endpoint.base_url)

    @property
    def config(self) -> Endpoint:
        """The endpoint configuration."""
        return self._endpoint

    async def _resending(self, once: Callable[[int], Awaitable[TurnTrace]]) -> TurnTrace:
        """``once(attempt)``, again on :class:`ConnectError` up to ``connect_retries`` times."""
        for attempt in range(self._connect_retries + 1):
            try:
                return await once(attempt)
            except ConnectError:
                if attempt == self._connect_retries:
                    raise
                self.reconnects += 1
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        """Release connections."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint!r}, reconnects={self.reconnects})"


def finish_stream(
    builder: TraceBuilder, end_ns: int, reconnects: int, headers: dict[str, str]
) -> TurnTrace:
    """Close a builder at end of body: a stream must end with ``[DONE]`` or a finish reason."""
    trace = builder.finish(end_ns, reconnects=reconnects, headers=headers)
    if not trace.done and trace.finish_reason is None:
        raise StreamProtocolError(
            f"stream from {builder.endpoint} ended after {trace.n_events} events "
            "with neither a finish_reason nor [DONE]",
            endpoint=builder.endpoint,
            trace=trace,
            unfinished=True,
        )
    return trace


async def status_error(
    status: int, headers: Any, body_reader: Any, endpoint: str
) -> APIStatusError:
    """Build the :class:`APIStatusError` subclass for a non-2xx answer."""
    raw: bytes = await body_reader
    body: Any
    try:
        body = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        body = raw.decode("utf-8", "replace")
    message = _error_message(body) or f"HTTP {status}"
    cls = (
        RateLimitError
        if status == 429
        else ServerError
        if status >= 500
        else BadRequestError
        if status >= 400
        else APIStatusError
    )
    return cls(
        f"{endpoint} answered {status}: {message}",
        status=status,
        body=body,
        retry_after=parse_retry_after(headers.get("Retry-After")),
        endpoint=endpoint,
    )


def _error_message(body: Any) -> str | None:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail")
            return str(msg) if msg is not None else None
        if isinstance(err, str):
            return err
        detail = body.get("detail") or body.get("message")
        return str(detail) if detail is not None else None
    if isinstance(body, str) and body:
        return body[:300]
    return None


def keep_headers(headers: Any) -> dict[str, str]:
    """The response headers traces keep: every ``x-*`` one, names lower-cased."""
    return {k.lower(): v for k, v in headers.items() if k[:2].lower() == "x-"}
