"""The transport branch of agentflow's exception tree (drawn in ``agentflow/_errors.py``,
which re-exports every class): what can go wrong on the wire, each error with the
endpoint and, for a stream, the partial turn."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from agentflow._errors_base import AgentflowError
from agentflow._redact import display_url, redact_bytes, redact_data

if TYPE_CHECKING:
    from agentflow._trace import TurnTrace

__all__ = [
    "APIStatusError",
    "AllReplicasDown",
    "BadRequestError",
    "ConnectError",
    "RateLimitError",
    "ServerError",
    "StreamInterrupted",
    "StreamPhase",
    "StreamProtocolError",
    "StreamTimeout",
    "TransportError",
    "UnexpectedContentType",
]


class TransportError(AgentflowError):
    """A request to a model server failed.

    Attributes:
        endpoint: the base URL the request went to (never the API key, never userinfo).
    """

    def __init__(self, message: str, *, endpoint: str | None = None) -> None:
        super().__init__(message)
        self.endpoint = None if endpoint is None else display_url(endpoint)


class ConnectError(TransportError):
    """The request cannot have reached the server: resending is safe.

    The connection could not be opened, or the request went out on a reused kept-alive
    connection that closed before any response byte (the server had closed it as idle).
    A new connection that carried the request and then closed is a
    :class:`StreamInterrupted`: the server may have received it.
    """


class _WithTrace(TransportError):
    def __init__(
        self, message: str, *, endpoint: str | None = None, trace: TurnTrace | None = None
    ) -> None:
        super().__init__(message, endpoint=endpoint)
        self.trace = trace


class StreamInterrupted(_WithTrace):
    """The connection dropped after the request was sent — the server may have received
    it — and before the response ended (or, on a new connection, before it began);
    ``trace`` holds what arrived."""


class StreamProtocolError(_WithTrace):
    """The server sent something that is not a valid chat-completions stream.

    Attributes:
        payload: the offending bytes (cut to 500), when one payload is to blame.
        unfinished: the body ended cleanly but early (no finish reason, no ``[DONE]``,
            or in the middle of an event): a stream cut mid-way rather than a malformed
            one.
    """

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        trace: TurnTrace | None = None,
        payload: bytes | None = None,
        unfinished: bool = False,
    ) -> None:
        super().__init__(message, endpoint=endpoint, trace=trace)
        self.payload = None if payload is None else redact_bytes(payload)
        self.unfinished = unfinished


class UnexpectedContentType(StreamProtocolError):
    """A 2xx answer to a streamed request whose body is declared as something other than
    an event stream: an HTML page (a proxy's login or error page), a whole JSON document
    (a server that ignored ``stream: true``), XML. Never retried by default: resending the
    same request gets the same page.

    Attributes:
        content_type: the ``Content-Type`` header as sent.
        status: the HTTP status (2xx).
        payload: the first bytes of the body (up to 500).
    """

    def __init__(
        self,
        message: str,
        *,
        content_type: str,
        status: int,
        endpoint: str | None = None,
        payload: bytes | None = None,
    ) -> None:
        super().__init__(message, endpoint=endpoint, payload=payload)
        self.content_type = content_type
        self.status = status


class APIStatusError(TransportError):
    """The server answered with a non-2xx status, or sent an error object inside an open
    stream (whose ``code`` picks the class as a status would: 429 → :class:`RateLimitError`,
    a "prompt too long" → ``ContextLengthExceeded``; no code → 500).

    Attributes:
        status: the HTTP status code (for an error in the stream, its ``code``).
        body: the parsed JSON error body, or the raw text when it was not JSON (with
            credentials masked, as in the message: servers echo rejected keys); for an
            error in the stream, its error object.
        retry_after: seconds from a ``Retry-After`` header, when one was sent.
        trace: for an error in the stream, what arrived before it; else ``None``.
    """

    #: What arrived before an error object inside the stream (``None`` for a status).
    trace: TurnTrace | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int,
        body: Any = None,
        retry_after: float | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(message, endpoint=endpoint)
        self.status = status
        self.body = redact_data(body)
        self.retry_after = retry_after


class BadRequestError(APIStatusError):
    """A 4xx other than 408 and 429: the request itself is wrong; resending will not help.

    (A 408 Request Timeout — the server stopped waiting for the request — is a plain
    :class:`APIStatusError`, retried by the default ``RetryPolicy``.)"""


class RateLimitError(APIStatusError):
    """429 Too Many Requests; ``retry_after`` says how long the server asked to wait."""


class ServerError(APIStatusError):
    """5xx, or an error object inside an open stream with a 5xx ``code`` or none."""


StreamPhase = Literal["connect", "first_token", "idle", "total"]


class StreamTimeout(_WithTrace):
    """A time limit ran out.

    Attributes:
        phase: which limit: ``connect``, ``first_token``, ``idle`` (gap between chunks)
            or ``total``.
        timeout_s: the limit, in seconds.
        trace: what had arrived when the limit ran out (``None`` before a request was
            sent, e.g. for ``connect``).
    """

    def __init__(
        self,
        message: str,
        *,
        phase: StreamPhase,
        timeout_s: float,
        endpoint: str | None = None,
        trace: TurnTrace | None = None,
    ) -> None:
        super().__init__(message, endpoint=endpoint, trace=trace)
        self.phase = phase
        self.timeout_s = timeout_s


_USERINFO = re.compile(r"(?<=//)[^/@\s]*@")


def _no_userinfo(text: str) -> str:
    """``text`` with the ``user:password@`` part of any URL in it removed."""
    return _USERINFO.sub("", text)


class AllReplicasDown(TransportError):
    """A turn failed while every replica was down (its circuit breaker open, or judging
    it failing), so no replica was left to retry on.

    Raised from the turn's own last error (its ``__cause__``). Never retried.

    Attributes:
        replicas: each replica's name → the last error that blamed it (``None`` if it
            has none on record). Names and messages carry no URL credentials.
    """

    def __init__(
        self, replicas: Mapping[str, TransportError | None], *, endpoint: str | None = None
    ) -> None:
        self.replicas = {_no_userinfo(name): err for name, err in replicas.items()}
        parts = [
            f"{name!r} ({_no_userinfo(f'{type(err).__name__}: {err}') if err else 'no error'})"
            for name, err in self.replicas.items()
        ]
        n = len(parts)
        super().__init__(
            f"all {n} replica{'s' if n != 1 else ''} down: " + "; ".join(parts),
            endpoint=_no_userinfo(endpoint) if endpoint else endpoint,
        )
