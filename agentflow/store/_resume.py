"""From a stored run back to sessions: rebuild each conversation from its recorded turns,
check that the agents given are the ones that ran, and decide what still has to run.

A session's messages are rebuilt as ``system prompt + task``, then per recorded turn
(its history first rewritten by the recorded ``rewrite`` if the context policy rewrote
it: a delta against the history so far, ``agentflow/_rewrite.py``) the assistant message
and the tool results in call order. The last turn's tool results are not appended here:
the session appends them itself when it resumes, running only the calls whose results
were not recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentflow._errors import (
    ConfigError,
    MaxTurnsExceeded,
    StoreError,
    TransportError,
)
from agentflow._metrics import turn_metrics
from agentflow._rewrite import apply_rewrite
from agentflow._session import Session, SessionResult, SessionStatus, TurnRecord
from agentflow.sched import FailedAttempt
from agentflow.store._codec import agent_info, fingerprints, shift_trace
from agentflow.store._recorded_error import recorded_error
from agentflow.store._records import StoredRun, StoredSession, StoredTurn

if TYPE_CHECKING:
    from agentflow._agent import Agent

__all__ = [
    "ResumePlan",
    "agents_by_name",
    "answered",
    "not_run_again",
    "opening",
    "plan_resume",
    "rebuild",
    "stored_prompts",
    "stored_result",
    "turn_prompts",
]


class _RecordedFailure(TransportError):
    """The error of a failed attempt at a stored turn (its text; the exception is gone)."""


def rebuild(
    run: StoredRun, s: StoredSession, to_attempt: int | None = None
) -> tuple[list[dict[str, Any]], list[TurnRecord]]:
    """A session's messages and turns as recorded, times moved onto ``to_attempt``'s
    clock (default the first attempt's). The last turn's tool results are left out when
    it asked for tools (see the module)."""
    messages: list[dict[str, Any]] | None = None
    turns: list[TurnRecord] = []
    for t, prompt in turn_prompts(run, s):
        # The list the next step appends the turn's message to (and, but after the
        # last turn, its tool results): after the loop, the whole conversation.
        messages = prompt
        turns.append(_turn_record(run, t, to_attempt))
    return (messages if messages is not None else opening(run, s)), turns


def opening(run: StoredRun, s: StoredSession) -> list[dict[str, Any]]:
    """The messages a session started with: its agent's system prompt, then its task."""
    info = run.agents.get(s.agent)
    system = info.instructions if info is not None else ""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.extend(dict(m) for m in s.task)
    return messages


def turn_prompts(
    run: StoredRun, s: StoredSession
) -> Iterator[tuple[StoredTurn, list[dict[str, Any]]]]:
    """Each recorded turn of ``s`` with its prompt as it was sent (the recorded
    ``rewrite`` applied). The list is one the next step goes on building: read it
    before asking for the next turn (:func:`stored_prompts` gives each its own).

    Raises:
        StoreError: a turn is missing, a turn with later ones lacks a tool result, or a
            recorded rewrite cannot be applied (damaged: it names the run, the session
            and the turn).
    """
    messages = opening(run, s)
    last = len(s.turns) - 1
    for i, t in enumerate(s.turns):
        if t.turn != i:
            raise StoreError(f"run {run.run_id!r}, session {s.session_id!r}: turn {i} is missing")
        if t.rewrite is not None:
            # ``messages`` is here what the live session held before its policy ran:
            # the previous prompt, its reply and its tool results (or, at turn 0, the
            # system prompt and the task).
            try:
                messages = apply_rewrite(t.rewrite, messages)
            except ValueError as exc:
                raise StoreError(
                    f"run {run.run_id!r}, session {s.session_id!r}, turn {i}: its recorded "
                    f"rewrite (column turns.rewrite) cannot be applied: {exc}"
                ) from None
        yield t, messages
        messages.append(dict(t.message))
        if i < last:
            if t.missing:
                raise StoreError(
                    f"run {run.run_id!r}, session {s.session_id!r}: turn {i} has later turns "
                    f"but no recorded result for tool calls {[c.id for c in t.missing]}"
                )
            messages.extend(_tool_messages(t))


def stored_prompts(
    run: StoredRun, session: StoredSession
) -> Iterator[tuple[StoredTurn, list[dict[str, Any]]]]:
    """Each recorded turn of ``session`` (of ``run``, from :meth:`Store.load`) with its
    prompt as it was sent: the messages before its reply, every recorded rewrite applied
    — :attr:`StoredTurn.rewrite` holds only what the context policy changed. Each list is
    the caller's own; the messages in it may be shared with other turns' lists.

    Raises:
        StoreError: a turn is missing, or a recorded rewrite cannot be applied (damaged;
            the message names the run, the session and the turn).
    """
    for t, prompt in turn_prompts(run, session):
        yield t, list(prompt)


def _tool_messages(t: StoredTurn) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": c.id, "content": t.tool_results[c.id].output}
        for c in t.calls
    ]


def _turn_record(run: StoredRun, t: StoredTurn, to_attempt: int | None) -> TurnRecord:
    delta = run.clock_offset(t.attempt, to_attempt)
    trace = shift_trace(t.trace, delta)
    metrics = turn_metrics(trace, ready_ns=t.ready_ns + delta)
    return TurnRecord(t.turn, metrics, trace, t.prompt, _failed_attempts(t))


def _failed_attempts(t: StoredTurn) -> tuple[FailedAttempt, ...]:
    """The turn's failed attempts as far as the store keeps them — how many, and each
    one's replica and error text (``"<replica>: <error>"``); not what arrived before it
    failed, nor the wait after it — so that the per-session retries of a stored or
    resumed run count them as the live run did."""
    out = []
    for i in range(t.failed_attempts):
        line = t.failures[i] if i < len(t.failures) else ""
        replica, sep, text = line.partition(": ")
        if not sep:
            replica, text = "", line
        error = _RecordedFailure(text or "(not recorded)", endpoint=replica or None)
        out.append(FailedAttempt(attempt=i, replica=replica, error=error, trace=None, wait_s=0.0))
    return tuple(out)


def stored_result(run: StoredRun, s: StoredSession, to_attempt: int | None = None) -> SessionResult:
    """The :class:`SessionResult` of a session as stored. A session that has not ended
    (a partial run) shows as ``cancelled``; a recorded error keeps only its type's name
    and its message (:func:`recorded_error`)."""
    messages, turns = rebuild(run, s, to_attempt)
    if s.turns and s.turns[-1].calls:
        messages.extend(_tool_messages_known(s.turns[-1]))
    status: SessionStatus
    error: BaseException | None = None
    if s.status in ("completed", "max_turns", "error", "cancelled"):
        status = s.status  # type: ignore[assignment]
    else:
        status = "cancelled"
    if s.status == "max_turns":
        max_turns = run.agents[s.agent].config.get("max_turns") if s.agent in run.agents else None
        error = MaxTurnsExceeded(session_id=s.session_id, max_turns=int(max_turns or len(turns)))
    elif s.error:
        error = recorded_error(s.error)
    return SessionResult(
        session_id=s.session_id,
        agent=s.agent,
        status=status,
        final_output=s.final_output,
        messages=messages,
        turns=turns,
        error=error,
        metadata=s.metadata,
    )


def _tool_messages_known(t: StoredTurn) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": c.id, "content": t.tool_results[c.id].output}
        for c in t.calls
        if c.id in t.tool_results
    ]


@dataclass(slots=True)
class ResumePlan:
    """What a resumed run does, session by session, in the run's order.

    Attributes:
        entries: per stored session, a :class:`Session` to run or the
            :class:`SessionResult` of one that is done.
        newly_done: sessions whose final answer was recorded but not their end (the run
            was killed in between): done now, and their end is to be recorded.
    """

    entries: list[Session | SessionResult]
    newly_done: list[SessionResult]

    @property
    def to_run(self) -> list[Session]:
        """The sessions that run."""
        return [e for e in self.entries if isinstance(e, Session)]


def agents_by_name(agents: Iterable[Agent] | Mapping[str, Agent]) -> dict[str, Agent]:
    """``agents`` by name (a mapping as given; two different agents of one name refused).

    Raises:
        ConfigError: ``agents`` is neither a mapping nor an iterable (a string is
            refused), or holds something other than an :class:`Agent`.
    """
    from agentflow._agent import Agent

    given: object = agents  # (checked: a caller may pass anything)
    if isinstance(given, Mapping):
        out: dict[str, Agent] = dict(given)
        for name, a in out.items():
            if not isinstance(a, Agent):
                raise ConfigError(
                    f"resume: agents= must map names to Agent, got {type(a).__name__} for {name!r}"
                )
        return out
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise ConfigError(
            "resume: agents= must be the run's agents (an iterable of Agent, or a mapping "
            f"of name to Agent), got {type(given).__name__}"
        )
    out = {}
    for a in given:
        if not isinstance(a, Agent):
            raise ConfigError(f"resume: agents= must hold Agent objects, got {type(a).__name__}")
        if a.name in out and out[a.name] is not a:
            raise ConfigError(f"resume: two different agents are named {a.name!r}")
        out[a.name] = a
    return out


def plan_resume(
    run: StoredRun, agents: Iterable[Agent] | Mapping[str, Agent], attempt: int
) -> ResumePlan:
    """Sessions to run and results of those that are done.

    Raises:
        ConfigError: an agent a session needs is missing, or its configuration is not
            the one the run recorded (the message names the agent).
    """
    by_name = agents_by_name(agents)
    entries: list[Session | SessionResult] = []
    newly: list[SessionResult] = []
    allowed: dict[str, set[str]] = {}  # agent name -> the fingerprints it may hold
    for s in run.sessions:
        if s.done:
            entries.append(stored_result(run, s, attempt))
            continue
        last = s.turns[-1] if s.turns else None
        if answered(s):  # its final answer was recorded
            assert last is not None
            s.status, s.final_output = "completed", last.trace.content
            result = stored_result(run, s, attempt)
            entries.append(result)
            newly.append(result)
            continue
        agent = by_name.get(s.agent)
        if agent is None:
            raise ConfigError(
                f"resume: run {run.run_id!r} needs agent {s.agent!r} (session "
                f"{s.session_id!r}); pass it in agents="
            )
        # Every session's, not each name's first: a run recorded before two
        # configurations under one name were refused (``check_one_config_per_name``)
        # may hold them (a conflict the store noted), and each session needs its own.
        ok = allowed.get(s.agent)
        if ok is None:
            ok = allowed[s.agent] = fingerprints(agent)
        if s.fingerprint not in ok:
            raise ConfigError(
                f"resume: agent {s.agent!r} is not configured as it was when run "
                f"{run.run_id!r} recorded it ({_what_differs(run, s, agent)}; session "
                f"{s.session_id!r}); resume with the same agent definition"
            )
        session = agent.session(s.task, session_id=s.session_id, metadata=s.metadata)
        messages, turns = rebuild(_as_run_by(run, s, agent), s, attempt)
        pending = last.calls if last is not None else ()
        known = {cid: r.output for cid, r in last.tool_results.items()} if last else {}
        session._restore(messages, turns, pending, known, home=s.sticky_replica)
        entries.append(session)
    return ResumePlan(entries, newly)


def _what_differs(run: StoredRun, s: StoredSession, agent: Agent) -> str:
    """What of ``agent`` differs from the one that ran ``s``, as the store recorded it
    (:func:`~agentflow.store._config_diff.config_changes`); the settings that could, when
    the record does not say (a session whose configuration is not the one the store kept
    for its agent's name, or a change the summary does not show)."""
    from agentflow.store._config_diff import config_changes

    info = run.agents.get(s.agent)
    changes = config_changes(info, agent) if info and info.fingerprint == s.fingerprint else []
    return "; ".join(changes) or "instructions, model, tools, params or limits differ"


def _as_run_by(run: StoredRun, s: StoredSession, agent: Agent) -> StoredRun:
    """``run`` with ``s``'s agent the one it ran with. A run recorded before two
    configurations under one name were refused keeps the first one's (system prompt
    included) for the name: a session of the other — whose fingerprint ``agent``'s
    matched — is rebuilt with ``agent``'s instructions, not the first one's."""
    info = run.agents.get(s.agent)
    if info is None or info.fingerprint == s.fingerprint:
        return run
    return replace(run, agents={**run.agents, s.agent: agent_info(agent)})


def answered(s: StoredSession) -> bool:
    """Whether a stored session's final answer was recorded (its last turn called no
    tool), though its end was not: a resumption ends it completed, without a request."""
    return bool(s.turns) and not s.turns[-1].calls


def not_run_again(s: StoredSession) -> bool:
    """Whether a resumption leaves the stored session ``s`` alone: it ended, or its final
    answer was recorded (:func:`plan_resume`)."""
    return s.done or answered(s)
