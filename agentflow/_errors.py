"""agentflow's one exception tree.

Errors are split by who is at fault, and each carries the facts a caller needs
to act on it as attributes, never only in its message::

    AgentflowError
    ├── ConfigError             user misconfiguration (also a ValueError)
    ├── TransportError          anything on the wire; ``.endpoint``
    │   ├── ConnectError        no response byte arrived: safe to resend
    │   ├── StreamInterrupted   dropped mid-stream; ``.trace`` keeps the partial turn
    │   ├── StreamProtocolError malformed SSE or JSON, or an unfinished stream; ``.trace``
    │   │   └── UnexpectedContentType  a 2xx that is not an event stream (HTML, JSON)
    │   ├── APIStatusError      non-2xx; ``.status``, ``.body``, ``.retry_after``
    │   │   ├── BadRequestError 4xx other than 429
    │   │   │   └── ContextLengthExceeded  the server refused the prompt as too long;
    │   │   │                              also a ContextOverflow (``.tokens``, ``.limit``)
    │   │   ├── RateLimitError  429
    │   │   └── ServerError     5xx, or an error object sent inside the stream
    │   ├── StreamTimeout       a time limit ran out; ``.phase``, ``.timeout_s``, ``.trace``
    │   └── AllReplicasDown     every replica is failing; ``.replicas`` (name → last error)
    ├── ToolError               a tool raised or got arguments it cannot take; ``.tool``
    │   └── ToolTimeout         a tool call ran past its limit; ``.timeout_s``
    ├── MaxTurnsExceeded        a session used ``max_turns`` without a final answer
    ├── ContextOverflow         a prompt cannot fit its window; ``.tokens``, ``.limit``
    ├── BudgetExceeded          a fleet-wide token or cost budget is spent; ``.budget``
    ├── StoreError              a run store cannot be opened, read or written (``agentflow.store``)
    │   ├── RunNotFound         no run with that id in the store; ``.run_id``
    │   └── RecordsLeftOut      records a commit left out, each failing on its own; ``.lost``
    ├── WorkerError             a ``Fleet(workers=N)`` worker process ended before its
    │                           sessions did (``.worker``, ``.exitcode``), or an error
    │                           from a worker that could not be sent as itself
    └── ServerStartError        a server agentflow starts (the simulator, llama.cpp,
                                PostgreSQL) exited or was not ready in time; ``.server``,
                                ``.exitcode``, its output's last lines in the message
                                (also a RuntimeError)

A failed session never raises out of :meth:`Fleet.run`: its error is kept on its
:class:`SessionResult` together with every turn it finished.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from agentflow._redact import display_url, redact, redact_bytes, redact_data

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
    "ContextLengthExceeded",
    "ContextOverflow",
    "MaxTurnsExceeded",
    "RateLimitError",
    "RecordsLeftOut",
    "RunNotFound",
    "ServerError",
    "ServerStartError",
    "StoreError",
    "StreamInterrupted",
    "StreamProtocolError",
    "StreamTimeout",
    "ToolError",
    "ToolTimeout",
    "TransportError",
    "UnexpectedContentType",
    "WorkerError",
]


class AgentflowError(Exception):
    """Base of every error agentflow raises on purpose.

    Its message never holds a credential: every registered secret, ``Bearer`` token
    and URL userinfo in it is masked when the error is built (``agentflow._redact``),
    so ``str``, ``repr``, tracebacks and reports of it are safe to print.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its args and attributes, rebuilt without calling __init__: most
        # subclasses take keyword-only arguments, which Exception's own pickling (the
        # class called with ``args``) cannot pass — an error in a Fleet(workers=N)
        # result failed to unpickle in the parent, which then took the worker for dead.
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls, *args)
    BaseException.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ConfigError(AgentflowError, ValueError):
    """A configuration value is wrong; the message names the field and the value."""


class TransportError(AgentflowError):
    """A request to a model server failed.

    Attributes:
        endpoint: the base URL the request went to (never the API key, never userinfo).
    """

    def __init__(self, message: str, *, endpoint: str | None = None) -> None:
        super().__init__(message)
        self.endpoint = None if endpoint is None else display_url(endpoint)


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
    """The server answered with a non-2xx status (or an error object in the stream).

    Attributes:
        status: the HTTP status code.
        body: the parsed JSON error body, or the raw text when it was not JSON (with
            credentials masked, as in the message: servers echo rejected keys).
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
        self.body = redact_data(body)
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


class ToolTimeout(ToolError):
    """A tool call did not return within its time limit.

    Attributes:
        tool: the tool's name.
        timeout_s: the limit it ran past, in seconds.
        threaded: it was a sync tool in its own thread, which keeps running until the
            function returns (Python cannot stop a thread); its result is dropped.
    """

    def __init__(self, *, tool: str, timeout_s: float, threaded: bool = False) -> None:
        tail = "; its thread keeps running until the function returns" if threaded else ""
        super().__init__(
            f"tool {tool!r} did not return within its time limit of {timeout_s:g} s "
            f"(timeout_s){tail}",
            tool=tool,
        )
        self.timeout_s = timeout_s
        self.threaded = threaded


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


class ContextLengthExceeded(BadRequestError, ContextOverflow):
    """The server refused a request as longer than its context window (a 4xx).

    Both a :class:`BadRequestError` (never retried: resending the same prompt gets the same
    answer) and a :class:`ContextOverflow`, with the numbers the server gave: vLLM's "This
    model's maximum context length is N tokens. However, you requested M tokens …", its
    newer "… for a total of M tokens", llama.cpp's ``exceed_context_size_error`` with
    ``n_ctx`` and ``n_prompt_tokens``, SGLang's and OpenAI's wordings. A budget that
    knows the server's real window (``ContextBudget.from_server``) acts before this.

    Attributes:
        tokens: what the request needed as the server counted it: prompt plus requested
            output when the server said both, else the prompt.
        limit: the server's context window.
        prompt_tokens: the prompt's tokens, when the server said.
        output_tokens: the output tokens requested (``max_tokens``), when the server said.
        session_id: the session whose request it was (``""`` until the session that sent
            it fills it in; the wire does not know sessions).
        status, body, retry_after, endpoint: as :class:`APIStatusError`.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        tokens: int,
        limit: int,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        body: Any = None,
        endpoint: str | None = None,
        session_id: str = "",
    ) -> None:
        # The two bases' initialisers cannot be chained cooperatively (each requires its
        # own keywords), so the base of both is called once and every field set here.
        AgentflowError.__init__(self, message)
        self.endpoint = None if endpoint is None else display_url(endpoint)
        self.status = status
        self.body = redact_data(body)
        self.retry_after = None
        self.session_id = session_id
        self.tokens = tokens
        self.limit = limit
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens


class StoreError(AgentflowError):
    """A run store (``agentflow.store``) cannot be opened, read or written; the message
    names the store's path and what failed."""


class RunNotFound(StoreError):
    """The store holds no run with this id.

    Attributes:
        run_id: the id asked for.
    """

    def __init__(self, run_id: str, where: str = "the store") -> None:
        super().__init__(f"no run {run_id!r} in {where}")
        self.run_id = run_id


class RecordsLeftOut(StoreError):
    """Records a store's commit left out, each because it failed on its own — a text
    holding a lone surrogate, which neither SQLite nor PostgreSQL can take, say — while
    the rest of their batch was committed. The store's next ``flush()`` (and ``aclose()``)
    raises it; an earlier loss stays the one reported.

    Attributes:
        lost: each record left out: what it is (its kind, key and run), and its error.
        where: the store (its path, or its redacted DSN).
    """

    def __init__(self, lost: list[tuple[str, Exception]], where: str = "the store") -> None:
        self.lost = list(lost)
        self.where = where
        named = "; ".join(f"{name}: {exc!r}" for name, exc in lost[:3])
        more = f"; and {len(lost) - 3} more" if len(lost) > 3 else ""
        super().__init__(
            f"{where}: {len(lost)} record(s) left out, each failing on its own (the rest of "
            f"their batch was committed): {named}{more}"
        )


class WorkerError(AgentflowError):
    """A ``Fleet(workers=N)`` worker process ended before its sessions did (their
    results carry this error), or an error raised in a worker that does not pickle
    (this carries its type and text instead).

    Attributes:
        worker: the worker's index (``None`` for a carried error).
        exitcode: the worker's exit code (negative: the signal that ended it), if known.
    """

    def __init__(self, message: str, *, worker: int | None, exitcode: int | None) -> None:
        super().__init__(message)
        self.worker = worker
        self.exitcode = exitcode


class ServerStartError(AgentflowError, RuntimeError):
    """A server agentflow starts in a child process — the simulator, llama.cpp's server,
    PostgreSQL for the tests — exited at start or was not ready in time.

    Attributes:
        server: what was started (``"llama.cpp server"``).
        exitcode: its exit status (negative: the signal that ended it); ``None`` if it was
            still running when it was given up on.
    """

    def __init__(self, message: str, *, server: str, exitcode: int | None) -> None:
        super().__init__(message)
        self.server = server
        self.exitcode = exitcode
