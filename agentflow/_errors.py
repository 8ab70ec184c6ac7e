"""agentflow's one exception tree.

Errors are split by who is at fault, and each carries the facts a caller needs
to act on it as attributes, never only in its message::

    AgentflowError
    ├── ConfigError             user misconfiguration (also a ValueError)
    ├── TransportError          anything on the wire; ``.endpoint``
    │   ├── ConnectError        the request cannot have reached the server: safe to resend
    │   ├── StreamInterrupted   dropped mid-stream; ``.trace`` keeps the partial turn
    │   ├── StreamProtocolError malformed SSE or JSON, or an unfinished stream; ``.trace``
    │   │   └── UnexpectedContentType  a 2xx that is not an event stream (HTML, JSON)
    │   ├── APIStatusError      non-2xx; ``.status``, ``.body``, ``.retry_after``; a 408
    │   │   │                   (the server stopped waiting for the request) is one itself
    │   │   ├── BadRequestError 4xx other than 408 and 429
    │   │   │   └── ContextLengthExceeded  the server refused the prompt as too long;
    │   │   │                              also a ContextOverflow (``.tokens``, ``.limit``)
    │   │   ├── RateLimitError  429
    │   │   └── ServerError     5xx (an error object sent inside the stream: by its code)
    │   ├── StreamTimeout       a time limit ran out; ``.phase``, ``.timeout_s``, ``.trace``
    │   └── AllReplicasDown     every replica is failing; ``.replicas`` (name → last error)
    ├── ToolError               a tool raised or got arguments it cannot take; ``.tool``
    │   └── ToolTimeout         a tool call ran past its limit; ``.timeout_s``
    ├── MaxTurnsExceeded        a session used ``max_turns`` without a final answer
    ├── ContextOverflow         a prompt cannot fit its window; ``.tokens``, ``.limit``
    ├── BudgetExceeded          a fleet-wide token or cost budget is spent; ``.budget``
    ├── StoreError              a run store cannot be opened, read or written (``agentflow.store``)
    │   ├── RunNotFound         no run with that id in the store; ``.run_id``
    │   ├── LeaseLost           a session's lease was taken by another worker: it stopped
    │   │                       here; ``.run_id``, ``.session_id``
    │   ├── RecordsLeftOut      records a commit left out, each failing on its own; ``.lost``
    │   └── StoreBacklogFull    a turn or tool result refused: as many as the store holds
    │                           wait to be committed (its server unreachable); ``.waiting``,
    │                           ``.limit``
    ├── WorkerError             a ``Fleet(workers=N)`` worker process ended before its
    │                           sessions did (``.worker``, ``.exitcode``), or an error
    │                           from a worker that could not be sent as itself
    └── ServerStartError        a server agentflow starts (the simulator, llama.cpp,
                                PostgreSQL) exited or was not ready in time; ``.server``,
                                ``.exitcode``, its output's last lines in the message
                                (also a RuntimeError)

A failed session never raises out of :meth:`Fleet.run`: its error is kept on its
:class:`SessionResult` together with every turn it finished.

The root and :class:`ConfigError` live in ``_errors_base.py``, the transport branch in
``_errors_transport.py``; this module defines the rest and re-exports every class.
"""

from __future__ import annotations

from typing import Any

from agentflow._errors_base import AgentflowError, ConfigError
from agentflow._errors_transport import (
    AllReplicasDown,
    APIStatusError,
    BadRequestError,
    ConnectError,
    RateLimitError,
    ServerError,
    StreamInterrupted,
    StreamPhase,
    StreamProtocolError,
    StreamTimeout,
    TransportError,
    UnexpectedContentType,
)
from agentflow._redact import display_url, redact_data

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
    "LeaseLost",
    "MaxTurnsExceeded",
    "RateLimitError",
    "RecordsLeftOut",
    "RunNotFound",
    "ServerError",
    "ServerStartError",
    "StoreBacklogFull",
    "StoreError",
    "StreamInterrupted",
    "StreamPhase",
    "StreamProtocolError",
    "StreamTimeout",
    "ToolError",
    "ToolTimeout",
    "TransportError",
    "UnexpectedContentType",
    "WorkerError",
]


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
    the rest of their batch was committed. The store's next ``flush()`` (or ``aclose()``)
    raises it once, naming every record left out since the last one it raised.

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


class LeaseLost(StoreError):
    """A recorded session's lease was taken by another worker — this one stalled past
    ``lease_ttl_s`` (a paused process, a store it could not reach), and the lease
    expired — as a renewal found. The session stops at its next step here (its next
    turn's or tool's record): the other worker runs it now, and this one's records of it
    would be refused anyway (fenced). It is the session's error in the run's result.

    Attributes:
        run_id: the run.
        session_id: the session.
    """

    def __init__(self, run_id: str, session_id: str) -> None:
        super().__init__(
            f"run {run_id!r}: session {session_id!r}'s lease was taken by another worker "
            "(this one's expired): it stopped here, the other runs it"
        )
        self.run_id = run_id
        self.session_id = session_id


class StoreBacklogFull(StoreError):
    """A turn or tool result refused by a store's ``write``: as many as it may hold wait
    to be committed — its server has been unreachable (or refusing them) that long, or a
    burst larger than the limit is still on its way to it.
    Those are kept, in order, and committed once the server takes them; this record is
    not. In a fleet, the session whose record it was fails with this error.

    Attributes:
        waiting: the turns and tool results written and not committed yet.
        limit: how many the store may hold (``PostgresStore(max_held=...)``).
        where: the store (its redacted DSN).
    """

    def __init__(self, waiting: int, limit: int, where: str, why: str = "") -> None:
        self.waiting = waiting
        self.limit = limit
        self.where = where
        because = f" ({why})" if why else ""
        super().__init__(
            f"{where}: record refused: {waiting} record(s) already wait to be committed, "
            f"the most this store holds (max_held={limit}){because}"
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
