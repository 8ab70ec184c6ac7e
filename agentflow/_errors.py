"""agentflow's one exception tree.

Errors are split by who is at fault, and each carries the facts a caller needs
to act on it as attributes, never only in its message::

    AgentflowError
    ├── ConfigError             user misconfiguration (also a ValueError)
    ├── TransportError          anything on the wire; ``.endpoint``
    │   ├── ConnectError        no response byte arrived: safe to resend
    │   ├── StreamInterrupted   dropped mid-stream; ``.trace`` keeps the partial turn
    │   ├── StreamProtocolError malformed SSE or JSON, or an unfinished stream; ``.trace``
    │   ├── APIStatusError      non-2xx; ``.status``, ``.body``, ``.retry_after``
    │   │   ├── BadRequestError 4xx other than 429
    │   │   ├── RateLimitError  429
    │   │   └── ServerError     5xx, or an error object sent inside the stream
    │   ├── StreamTimeout       a time limit ran out; ``.phase``, ``.timeout_s``, ``.trace``
    │   └── AllReplicasDown     every replica is failing; ``.replicas`` (name → last error)
    ├── ToolError               a tool raised or got arguments it cannot take; ``.tool``
    ├── MaxTurnsExceeded        a session used ``max_turns`` without a final answer
    ├── ContextOverflow         a prompt cannot fit its window; ``.tokens``, ``.limit``
    └── BudgetExceeded          a fleet-wide token or cost budget is spent; ``.budget``

A failed session never raises out of :meth:`Fleet.run`: its error is kept on its
:class:`SessionResult` together with every turn it finished.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agentflow._trace import TurnTrace

__all__ = [
    "APIStatusError",
    "AgentflowError",
    "AllReplicasDown",
    "BadRequestError",
    "BudgetExceeded",
    "ConfigError",
    "ConnectError",
    "ContextOverflow",
    "MaxTurnsExceeded",
    "RateLimitError",
    "ServerError",
    "StreamInterrupted",
    "StreamProtocolError",
    "StreamTimeout",
    "ToolError",
    "TransportError",
]


class AgentflowError(Exception):
    """Base of every error agentflow raises on purpose."""


class ConfigError(AgentflowError, ValueError):
    """A configuration value is wrong; the message names the field and the value."""


class TransportError(AgentflowError):
    """A request to a model server failed.

    Attributes:
        endpoint: the base URL the request went to (never the API key).
    """

    def __init__(self, message: str, *, endpoint: str | None = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint


class ConnectError(TransportError):
    """The connection failed or closed before any response byte: resending is safe."""


class _WithTrace(TransportError):
    def __init__(
        self, message: str, *, endpoint: str | None = None, trace: TurnTrace | None = None
    ) -> None:
        super().__init__(message, endpoint=endpoint)
        self.trace = trace


class StreamInterrupted(_WithTrace):
    """The connection dropped after the response began; ``trace`` holds what arrived."""


class StreamProtocolError(_WithTrace):
    """The server sent something that is not a valid chat-completions stream.

    Attributes:
        payload: the offending bytes (cut to 500), when one payload is to blame.
        unfinished: the body ended cleanly but early (no finish reason, no ``[DONE]``):
            a stream cut mid-way rather than a malformed one.
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
        self.payload = payload
        self.unfinished = unfinished


class APIStatusError(TransportError):
    """The server answered with a non-2xx status (or an error object in the stream).

    Attributes:
        status: the HTTP status code.
        body: the parsed JSON error body, or the raw text when it was not JSON.
        retry_after: seconds from a ``Retry-After`` header, when one was sent.
    """

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
        self.body = body
        self.retry_after = retry_after


class BadRequestError(APIStatusError):
    """A 4xx other than 429: the request itself is wrong; resending will not help."""


class RateLimitError(APIStatusError):
    """429 Too Many Requests; ``retry_after`` says how long the server asked to wait."""


class ServerError(APIStatusError):
    """5xx, or an error the server reported inside an open stream."""


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


class ToolError(AgentflowError):
    """A tool raised, or the model called it with arguments it cannot take.

    Attributes:
        tool: the tool's name.
    """

    def __init__(self, message: str, *, tool: str) -> None:
        super().__init__(message)
        self.tool = tool


class MaxTurnsExceeded(AgentflowError):
    """A session used ``max_turns`` model turns without a final answer."""

    def __init__(self, *, session_id: str, max_turns: int) -> None:
        super().__init__(
            f"session {session_id!r} reached max_turns={max_turns} without a final answer"
        )
        self.session_id = session_id
        self.max_turns = max_turns


class ContextOverflow(AgentflowError):
    """A session's prompt does not fit its context window, and its policy could not fix it.

    Attributes:
        session_id: the session.
        tokens: the prompt's (calibrated) token count, output reserve and margin included.
        limit: the window it had to fit.
    """

    def __init__(self, message: str, *, session_id: str, tokens: int, limit: int) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.tokens = tokens
        self.limit = limit


class BudgetExceeded(AgentflowError):
    """A fleet-wide budget (tokens or cost) is spent; no further turn is started.

    Attributes:
        budget: which budget: ``"tokens"`` or ``"cost"``.
        spent: how much was used.
        limit: the budget.
    """

    def __init__(self, message: str, *, budget: str, spent: float, limit: float) -> None:
        super().__init__(message)
        self.budget = budget
        self.spent = spent
        self.limit = limit
