"""Streaming events: what a run tells its callbacks and :meth:`Fleet.stream` iterators.

Events are immutable objects told apart by ``type``: frozen dataclasses, except
:class:`TokenEvent` — one per streamed delta, so a frozen :class:`msgspec.Struct`,
which costs about a twentieth of a frozen dataclass to build. :data:`Event` is their
union. The bus that delivers them is in ``_event_bus.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

import msgspec

from agentflow._context_events import (
    BudgetEvent,
    CacheBusterWarning,
    CompactionEvent,
    ContextTrimmedEvent,
)
from agentflow._metrics import TurnMetrics
from agentflow._trace import PromptInfo, ToolCall, TurnTrace
from agentflow.typing import DeltaKind

if TYPE_CHECKING:
    from agentflow._fleet import FleetResult
    from agentflow._session import SessionResult
    from agentflow.sched._runner import FailedAttempt

__all__ = [
    "AttemptDiscardedEvent",
    "ErrorEvent",
    "Event",
    "FleetEndEvent",
    "FleetStartEvent",
    "RetryEvent",
    "SessionEndEvent",
    "TokenEvent",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnEndEvent",
]


class TokenEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A delta of output: answer text, reasoning, or tool-call arguments.

    Built once per streamed delta (and only when some callback reads tokens), so it is
    a frozen :class:`msgspec.Struct` rather than a dataclass like the other events:
    the same fields, keyword-only construction, immutability (assigning a field raises
    ``AttributeError``), equality, hashing, ``repr`` and pickling, at about a twentieth
    of a frozen dataclass's cost. The ``dataclasses`` functions do not apply to it: use
    ``msgspec.structs.replace`` and ``msgspec.structs.asdict`` instead of
    ``dataclasses.replace`` and ``dataclasses.asdict``. It holds only strings and
    integers, so the garbage collector does not track it (``gc=False``).

    Attributes:
        agent, session_id, turn: whose turn streamed it.
        kind: ``"content"``, ``"reasoning"`` or ``"tool_call"`` (argument text).
            Tool-call deltas are for display: they do not say which call they belong
            to, and a model that streams parallel calls may interleave their
            arguments, so their concatenation need not be valid JSON. Each call's
            name, id and whole arguments are on its :class:`ToolCallEvent` (and the
            turn's ``trace.tool_calls``): the source of truth per call.
        text: the delta's text.
        t_ns: when it arrived, in nanoseconds (the timestamp of the read that carried it).
    """

    agent: str
    session_id: str
    turn: int
    kind: DeltaKind
    text: str
    t_ns: int
    type: Literal["token"] = "token"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent:
    """The model asked for a tool; it is about to run."""

    agent: str
    session_id: str
    turn: int
    call: ToolCall
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent:
    """A tool finished; ``output`` is what goes back to the model.

    ``truncated_chars`` counts the characters cut from the tool's output by its
    ``max_output_chars`` cap (0 when nothing was cut); a cut ``output`` ends with a
    marker line saying so.
    """

    agent: str
    session_id: str
    turn: int
    call_id: str
    name: str
    output: str
    is_error: bool
    duration_s: float
    truncated_chars: int = 0
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndEvent:
    """A model turn finished streaming; its metrics and trace, and what the client
    estimated of its prompt (``None`` without a context policy)."""

    agent: str
    session_id: str
    turn: int
    metrics: TurnMetrics
    trace: TurnTrace
    prompt: PromptInfo | None = None
    type: Literal["turn_end"] = "turn_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEndEvent:
    """A session ended (completed, hit ``max_turns``, failed, or was cancelled)."""

    agent: str
    session_id: str
    result: SessionResult
    type: Literal["session_end"] = "session_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent:
    """Something failed. ``where`` says what: a session, a tool, or a callback.

    ``turn``, for ``where="session"``, is the turn being worked on when it failed (the
    model turn, or the turn whose tool call ended the session) — except for a session
    whose worker was lost (``Fleet(workers=N)``, a ``WorkerError``): there it is the turn
    whose tokens that worker was streaming, known only when token events are read, and
    ``None`` otherwise (no token reader, or lost between turns).
    """

    agent: str | None
    session_id: str | None
    turn: int | None
    where: Literal["session", "tool", "callback"]
    error: BaseException
    type: Literal["error"] = "error"


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptDiscardedEvent:
    """An attempt at a model turn failed: drop every token it streamed.

    Emitted once per failed attempt, immediately after its last :class:`TokenEvent`
    and before anything else about it: before its :class:`RetryEvent` when the turn
    is sent again (``retried``), or before the session's :class:`ErrorEvent` when it
    was the last attempt. (With ``Fleet(workers=N)``, the parent makes the discard of
    what a worker lost mid-turn had streamed: ``retried`` with no :class:`RetryEvent`
    when a new worker streams the turn again.) Attempts of one turn run one after
    another, so a callback that keeps the text of ``(session_id, turn)`` just clears
    it here; what it gathers afterwards is exactly the turn that succeeds (the text of
    the final message). The counts describe the ``TokenEvent``s of this attempt that were
    emitted (0 when no callback reads tokens, or when it failed before any output);
    a turn that fails before an attempt is sent (a policy's or the scheduler's error
    while it waits for a slot) has no discard for it, only the :class:`ErrorEvent`;
    the partial output itself stays on the turn's ``failed_attempts`` (and on
    ``error.trace`` where the error has one).

    Attributes:
        attempt: which attempt failed: 0 for the first try of the turn.
        deltas: how many ``TokenEvent``s it emitted, of every kind.
        chars: the characters in them, of every kind.
        content_chars: the answer-text (``kind="content"``) characters among them.
        retried: whether the turn is sent again: a :class:`RetryEvent` follows — or, for
            the discard the parent makes of a worker lost mid-turn
            (``Fleet(workers=N)``), none does: the new worker's tokens of the turn follow.
        error: why the attempt failed.
    """

    agent: str
    session_id: str
    turn: int
    attempt: int
    deltas: int
    chars: int
    content_chars: int
    retried: bool
    error: BaseException
    type: Literal["attempt_discarded"] = "attempt_discarded"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryEvent:
    """A turn's attempt failed and will be sent again after ``wait_s``.

    Tokens this attempt already streamed (``TokenEvent``s) are discarded: the turn is
    re-run from its start and the conversation keeps only the attempt that succeeds.
    An :class:`AttemptDiscardedEvent` for the same attempt comes just before this event.

    A context policy's own model request for the turn (a compaction's summary) is
    retried the same way, before the turn is sent: its retry is a ``RetryEvent`` for
    that turn too, with no :class:`AttemptDiscardedEvent` (it streams no tokens to the
    callbacks), and its failed attempt is on no turn's ``failed_attempts``. Every retry
    ``FleetResult.retries`` counts has its ``RetryEvent`` in this attempt at the run (a
    resumed run's ``retries`` also counts its earlier attempts').
    """

    agent: str
    session_id: str
    turn: int
    attempt: FailedAttempt
    type: Literal["retry"] = "retry"


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetStartEvent:
    """The first event of a fleet run: how many sessions, and the clock at the start.

    Attributes:
        sessions: the sessions the run starts with; for a resumed run, all of the
            run's, those that ended in earlier attempts too. Sessions started later by
            the run's own sessions — a benchmark level's successors and subagents — are
            not counted.
        start_ns: the fleet's clock at the start (of this attempt, for a resumed run).
    """

    sessions: int
    start_ns: int
    type: Literal["fleet_start"] = "fleet_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetEndEvent:
    """The last event of :meth:`Fleet.stream`: every session has ended.

    Attributes:
        result: the run's result — the one :meth:`Fleet.run` and :meth:`Fleet.resume`
            return. With a store: its ``run_id``, and for a resumed run every session
            of the run, ``wall_s`` and ``retries`` over all its attempts, ``start_ns``
            ``None``.
    """

    result: FleetResult
    type: Literal["fleet_end"] = "fleet_end"


#: Every event agentflow emits; match on ``event.type``.
Event: TypeAlias = (
    TokenEvent
    | ToolCallEvent
    | ToolResultEvent
    | TurnEndEvent
    | SessionEndEvent
    | AttemptDiscardedEvent
    | RetryEvent
    | FleetStartEvent
    | ContextTrimmedEvent
    | CompactionEvent
    | BudgetEvent
    | CacheBusterWarning
    | ErrorEvent
    | FleetEndEvent
)
