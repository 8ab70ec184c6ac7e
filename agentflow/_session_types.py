"""What a session produces and reports: :class:`TurnRecord` (one finished model turn),
:class:`SessionResult` (how it ended, with everything on the way) and :class:`TurnLog`
(what a run store is told as the session goes). The turn loop is in ``_session.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentflow._metrics import TurnMetrics
from agentflow._trace import PromptInfo, ToolCall, TurnTrace
from agentflow.sched import FailedAttempt

if TYPE_CHECKING:
    from agentflow._rewrite import RewriteItem
    from agentflow._session import Session

__all__ = ["SessionResult", "SessionStatus", "TurnLog", "TurnRecord"]


#: How a session ended.
SessionStatus = Literal["completed", "max_turns", "error", "cancelled"]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One finished model turn.

    Attributes:
        index: the turn's number in its session, from 0.
        metrics: its latency figures.
        trace: what arrived on the wire.
        prompt: the client's estimate of its prompt (when the agent has a context policy).
        failed_attempts: attempts that failed and were retried before this one succeeded
            (their partial output is here, not in the conversation).
    """

    index: int
    metrics: TurnMetrics
    trace: TurnTrace
    prompt: PromptInfo | None = None
    failed_attempts: tuple[FailedAttempt, ...] = ()


class TurnLog(Protocol):
    """Told what a session finished, as it finishes it (a run store's recorder,
    ``agentflow.store``). Called on the event loop; must not block."""

    def turn_starting(self, session: Session, turn: int) -> None:
        """Model turn ``turn`` is about to be sent (after its context links ran). May
        raise, to stop the session before it costs a request (a run store's recorder:
        :class:`~agentflow.LeaseLost`, another worker holds the session now)."""

    def turn_finished(
        self,
        session: Session,
        record: TurnRecord,
        ready_ns: int,
        rewrite: list[RewriteItem] | None,
    ) -> None:
        """A turn finished and its assistant message (``session.messages[-1]``) was
        appended. ``rewrite``: when the context policy rewrote the history before this
        turn, what it changed, as a run store records it — a list of messages and
        ``(start, stop)`` runs of the history before the policy ran (``docs/store.md``);
        else ``None``. The prompt as sent is ``session.messages[:-1]`` either way."""

    def tool_finished(
        self,
        session: Session,
        turn: int,
        call: ToolCall,
        output: str,
        is_error: bool,
        duration_s: float,
        truncated_chars: int,
    ) -> None:
        """A tool call produced ``output``; it is appended to the messages next."""

    def session_ended(self, session: Session, result: SessionResult) -> None:
        """The session ended (any status)."""


@dataclass(slots=True, kw_only=True)
class SessionResult:
    """How a session ended, and everything it produced on the way.

    Attributes:
        status: ``completed`` (a final answer), ``max_turns``, ``error`` or ``cancelled``.
        final_output: the last assistant message's text, when the session completed.
        messages: the whole conversation, system prompt first.
        turns: every model turn that finished, with its metrics and trace.
        error: what ended the session, unless it completed.
        metadata: what was given as ``Agent.session(..., metadata=...)``.
        end_ns: when it ended, on the fleet's clock (the traces' clock); ``None`` when not
            known (a result read back from a run store, which keeps no end time).
    """

    session_id: str
    agent: str
    status: SessionStatus
    final_output: str | None
    messages: list[dict[str, Any]]
    turns: list[TurnRecord]
    error: BaseException | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    end_ns: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the session reached a final answer."""
        return self.status == "completed"

    @property
    def output_tokens(self) -> int:
        """Output tokens over all turns."""
        return sum(t.metrics.output_tokens for t in self.turns)
