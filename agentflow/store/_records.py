"""What a store is told, and what it gives back.

The write side is a handful of frozen records — a run started, a session started, a
turn finished, a tool call produced its result, a session ended, the run ended — that
the fleet hands to :meth:`Store.write` on the event loop's hot path. They are frozen
``msgspec.Struct`` objects, not dataclasses: a frozen dataclass with a dozen fields cost
~3.6 µs to build on this machine (one ``object.__setattr__`` per field), a Struct
~0.3 µs, and one is built per turn and per tool result. A backend keeps
them in order and encodes them later, off the loop: the records only *reference* the
fleet's objects (the assistant message, the trace), which agentflow never mutates once
a turn has finished.

The read side (:class:`StoredRun` and what it holds) is what :meth:`Store.load` returns
and what resuming and exporting a run are built from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import msgspec

from agentflow._errors import ConfigError
from agentflow._metrics import TurnMetrics
from agentflow._trace import PromptInfo, ToolCall, TurnTrace

__all__ = [
    "MAX_NAME_BYTES",
    "AgentInfo",
    "PolicyState",
    "Record",
    "RunAttempt",
    "RunEnded",
    "RunStarted",
    "SessionEnded",
    "SessionStarted",
    "StoredRun",
    "StoredSession",
    "StoredToolResult",
    "StoredTurn",
    "ToolFinished",
    "TurnFinished",
    "check_name",
    "describe_record",
    "shortened",
]

#: A session's state in the store: ``pending`` until it ends, then how it ended.
StoredStatus = Literal["pending", "completed", "max_turns", "error", "cancelled"]

#: Statuses after which a resumed run does not run the session again.
FINAL_STATUSES: frozenset[str] = frozenset({"completed", "max_turns"})


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentInfo:
    """An agent as the store knows it: its name, its configuration's fingerprint, its
    system prompt (stored once per distinct text) and a JSON summary of the rest."""

    name: str
    fingerprint: str
    instructions: str
    config: Mapping[str, Any]


class RunStarted(msgspec.Struct, frozen=True, kw_only=True):
    """A run (``attempt`` 0) or a resumption of it (``attempt`` ≥ 1) started.

    ``clock_ns`` is the fleet clock's reading at ``wall_ns`` (``time.time_ns()``): with
    both, traces recorded by different processes are put on one time line. An attempt
    resumed on virtual time records as ``wall_ns`` where the earlier attempts left that
    line instead (:meth:`StoredRun.timeline_end_ns`): virtual time keeps no pace with the
    wall clock.
    """

    run_id: str
    attempt: int
    wall_ns: int
    clock_ns: int
    sessions: int
    config: Mapping[str, Any] | None = None


class SessionStarted(msgspec.Struct, frozen=True, kw_only=True):
    """A session of the run, recorded once when the run starts: its initial messages
    (those after the agent's system prompt: the task) and its place in the run."""

    run_id: str
    session_id: str
    position: int
    agent: AgentInfo
    task: Sequence[Mapping[str, Any]]
    metadata: Mapping[str, Any]


class TurnFinished(msgspec.Struct, frozen=True, kw_only=True):
    """A model turn finished and its assistant message was appended.

    Attributes:
        message: the one message the turn appended (the assistant's).
        rewrite: when the context policy rewrote the history before this turn (trimmed,
            truncated, compacted), what it changed: the history sent as a list of
            messages (new or changed ones) and ``(start, stop)`` runs of the history
            before the policy ran, kept as they were (``agentflow/_rewrite.py``); else
            ``None``.
        ready_ns: when the turn became ready to send (its queue wait starts there).
        failed_attempts: how many attempts failed and were retried first.
        failures: one line per failed attempt (its error).
    """

    run_id: str
    session_id: str
    turn: int
    attempt: int
    message: Mapping[str, Any]
    rewrite: Sequence[Mapping[str, Any] | tuple[int, int]] | None
    ready_ns: int
    trace: TurnTrace
    metrics: TurnMetrics
    prompt: PromptInfo | None
    failed_attempts: int = 0
    failures: tuple[str, ...] = ()


class ToolFinished(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call produced its result (recorded before the result is appended)."""

    run_id: str
    session_id: str
    turn: int
    call: ToolCall
    output: str
    is_error: bool
    duration_s: float
    truncated_chars: int = 0


class SessionEnded(msgspec.Struct, frozen=True, kw_only=True):
    """A session ended (any status; ``cancelled`` sessions are run again on resume)."""

    run_id: str
    session_id: str
    status: str
    final_output: str | None
    error: str | None
    turns: int


class RunEnded(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt at the run ended cleanly (not killed): ``status`` is ``finished``
    when every session reached a final status, else ``partial``. ``start_ns``: the
    fleet's own start on its clock (its ``FleetStartEvent``'s), when known: the attempt's
    moment (``run_attempts.wall_ns``, ``clock_ns``), read before its sessions were
    recorded and claimed, is moved there along the same wall-to-fleet-clock line (the
    clocks' offset unchanged), so that a stored report's times start where the live
    report's did."""

    run_id: str
    attempt: int
    wall_ns: int
    status: Literal["finished", "partial"]
    retries: int = 0
    wall_s: float = 0.0
    start_ns: int | None = None


class PolicyState(msgspec.Struct, frozen=True, kw_only=True):
    """What a context policy learnt so far, under a key stable across processes (e.g.
    ``calibrator:<agent>``): a calibrator's fit (:meth:`Calibrator.to_state`). Written
    when a session ends and when the attempt ends; a later one replaces an earlier one
    of the same key, and :meth:`Fleet.resume` restores the last."""

    run_id: str
    key: str
    state: Mapping[str, Any]


#: Everything :meth:`Store.write` accepts.
Record: TypeAlias = (
    RunStarted
    | SessionStarted
    | TurnFinished
    | ToolFinished
    | SessionEnded
    | RunEnded
    | PolicyState
)


def describe_record(r: Record) -> str:
    """What a log line or an error calls record ``r``: its kind and key (a part of the
    key longer than 80 characters shortened, its length said: a model's 3,000-character
    tool-call id is not repeated whole in every message about it)."""
    run = shortened(r.run_id)
    if isinstance(r, TurnFinished):
        return f"turn {shortened(r.session_id)}/{r.turn} of run {run}"
    if isinstance(r, ToolFinished):
        return f"tool call {shortened(r.session_id)}/{shortened(r.call.id)} of run {run}"
    key = getattr(r, "session_id", None) or getattr(r, "key", None)
    what = type(r).__name__ if key is None else f"{type(r).__name__} {shortened(key)}"
    return f"{what} of run {run}"


def shortened(text: str) -> str:
    """``text``, or — longer than 80 characters — its start and its length."""
    return text if len(text) <= 80 else f"{text[:60]}…({len(text)} chars)"


#: The longest run id, session id or agent name a store takes, in UTF-8 bytes
#: (:func:`check_name`): PostgreSQL refuses a key longer than an index row can hold
#: (~2,700 bytes; a tool result's key is its run id, session id and call id together).
MAX_NAME_BYTES = 512


def check_name(value: object, what: str) -> None:
    """Refuse ``value`` as a run id, session id or agent name in a store: it must be a
    string without NUL or a lone surrogate, at most :data:`MAX_NAME_BYTES` bytes in
    UTF-8. PostgreSQL's ``TEXT`` cannot hold NUL (the store would keep it as U+FFFD, and
    a lookup by the given name would not find it) and SQLite's can: refused up front,
    the two stores behave the same. Neither can keep a lone surrogate (text is UTF-8; a
    non-UTF-8 byte of a command-line argument is one): refused up front, it is not a
    bare ``UnicodeEncodeError`` from the store, or a record left out at the run's end.
    PostgreSQL refuses a key longer than an index row (~2,700 bytes) and SQLite does
    not: a longer name is refused on both, so that a run recorded in one can be kept in
    the other.

    Raises:
        ConfigError: it is not such a string (``what`` names it).
    """
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ConfigError(
            f"{what} must not hold a NUL character (a run store cannot keep it as it is), "
            f"got {value!r}"
        )
    size = len(value)
    if not value.isascii():
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise ConfigError(
                f"{what} must not hold a lone surrogate (U+{ord(value[e.start]):04X} at index "
                f"{e.start}; a run store keeps UTF-8 text), got {value!r}"
            ) from None
    if size > MAX_NAME_BYTES:
        raise ConfigError(
            f"{what} must be at most {MAX_NAME_BYTES} bytes in UTF-8 (a run store's keys "
            f"are bounded), got {size}: {value[:40]!r}…"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredToolResult:
    """A recorded tool result, keyed by its call id."""

    call_id: str
    name: str
    arguments: str
    output: str
    is_error: bool
    duration_s: float
    truncated_chars: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredTurn:
    """A recorded turn and the tool results recorded for it (by call id).

    Times in ``trace`` and ``ready_ns`` are on the clock of the attempt that recorded
    the turn (see :meth:`StoredRun.clock_offset`).

    ``rewrite`` is ``None`` unless the context policy rewrote the history before this
    turn; then it is what the policy changed, as stored (:attr:`TurnFinished.rewrite`):
    a list whose items are messages and ``[start, stop]`` runs of the history before
    the policy ran — not the prompt itself. (A store written by agentflow before schema
    version 2 holds the whole history there: a list of messages only, which reads the
    same way.) Each turn's prompt as it was sent, the rewrite applied, is what
    :func:`~agentflow.store.stored_prompts` gives.
    """

    turn: int
    attempt: int
    message: dict[str, Any]
    rewrite: list[dict[str, Any] | list[int]] | None
    ready_ns: int
    trace: TurnTrace
    prompt: PromptInfo | None
    failed_attempts: int
    tool_results: dict[str, StoredToolResult] = field(default_factory=dict)
    #: One line per failed attempt, ``"<replica>: <error>"`` (:attr:`TurnFinished.failures`).
    failures: tuple[str, ...] = ()

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """The tool calls this turn asked for."""
        return self.trace.tool_calls

    @property
    def missing(self) -> tuple[ToolCall, ...]:
        """The calls whose results were not recorded (they run again on resume)."""
        return tuple(c for c in self.trace.tool_calls if c.id not in self.tool_results)


@dataclass(slots=True, kw_only=True)
class StoredSession:
    """A recorded session: how it started, its turns in order, and how it ended."""

    session_id: str
    position: int
    agent: str
    fingerprint: str
    task: list[dict[str, Any]]
    metadata: dict[str, Any]
    status: str = "pending"
    final_output: str | None = None
    error: str | None = None
    turns: list[StoredTurn] = field(default_factory=list)
    sticky_replica: str | None = None
    #: The run's latest attempt when its end (or ``pending`` mark) was recorded; ``None``
    #: where the store does not keep it (SQLite: one attempt at a run at a time). An end
    #: written again by a worker that re-ran the session has a later one than the end
    #: before it: a resumed attempt that finds it changed since it started knows the
    #: session was ended elsewhere, its status and turns the same. ``-1``: the store
    #: keeps it, but no end is stamped — none yet, or one recorded before the store kept
    #: it (PostgreSQL, before stop 40).
    ended_attempt: int | None = field(default=None, compare=False)

    @property
    def done(self) -> bool:
        """Whether a resumed run leaves it alone (it completed or hit ``max_turns``)."""
        return self.status in FINAL_STATUSES


@dataclass(frozen=True, slots=True, kw_only=True)
class RunAttempt:
    """One process's go at a run: when it started, on which clock, and how it ended
    (``ended_wall_ns`` is ``None`` for an attempt that was killed or is running)."""

    attempt: int
    wall_ns: int
    clock_ns: int
    ended_wall_ns: int | None = None
    status: str | None = None
    retries: int = 0
    wall_s: float | None = None


@dataclass(slots=True, kw_only=True)
class StoredRun:
    """A recorded run: its configuration, its attempts, its agents and sessions.

    Attributes:
        config: what the caller recorded with the run (``Fleet.run(run_config=...)``).
        status: ``running`` until an attempt ends cleanly; then ``finished`` or ``partial``.
        agents: each agent's :class:`AgentInfo`, by name.
        sessions: every session, in the order the run was given them.
    """

    run_id: str
    config: dict[str, Any] | None
    status: str
    attempts: list[RunAttempt]
    agents: dict[str, AgentInfo]
    sessions: list[StoredSession]
    #: The context policies' learnt state, by key (:class:`PolicyState`; the last
    #: written of each).
    policy_state: dict[str, Any] = field(default_factory=dict)
    #: ``time.time_ns()`` when the run was created (its first attempt's ``wall_ns`` as
    #: recorded then; the attempt's own is moved to the fleet's start at its end): with
    #: the run id, which recorded run this is, in whichever store (``None``: unknown).
    created_wall_ns: int | None = None

    def clock_offset(self, attempt: int, to_attempt: int | None = None) -> int:
        """Nanoseconds to add to a time recorded by ``attempt`` to put it on the clock of
        ``to_attempt`` (default the first attempt), through the wall clock."""
        by = {a.attempt: a for a in self.attempts}
        src = by.get(attempt)
        dst = by.get(0 if to_attempt is None else to_attempt)
        if src is None or dst is None:
            return 0
        return (src.wall_ns - src.clock_ns) - (dst.wall_ns - dst.clock_ns)

    def timeline_end_ns(self) -> int:
        """Where the run's attempts left its time line, on the wall clock (each attempt's
        readings put there through its ``wall_ns`` and ``clock_ns``): the latest of the
        attempts' starts, their recorded ends and their turns' ends (a killed attempt's
        last reading). A resumed attempt on virtual time starts there."""
        epoch = {a.attempt: a.wall_ns - a.clock_ns for a in self.attempts}
        latest = max((a.wall_ns for a in self.attempts), default=0)
        for a in self.attempts:
            if a.wall_s is not None:
                latest = max(latest, a.wall_ns + int(a.wall_s * 1e9))
        for s in self.sessions:
            for t in s.turns:
                if t.attempt in epoch:
                    latest = max(latest, epoch[t.attempt] + t.trace.end_ns)
        return latest
