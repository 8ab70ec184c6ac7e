"""The events budgets emit: a prompt trimmed, a history compacted, a fleet budget crossed.

They are frozen dataclasses told apart by ``type``, like every :data:`agentflow.Event`,
and reach the fleet's callbacks through the ``emit`` a session hands to
:meth:`~agentflow.context.ContextBudget.bind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentflow._trace import TurnTrace

__all__ = ["BudgetEvent", "CompactionEvent", "ContextTrimmedEvent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextTrimmedEvent:
    """An overflow policy rewrote a session's messages to bring its prompt inside the window.

    One event per policy that changed something; a chain (truncate, then compact) emits
    one for each step it took. Token figures are calibrated estimates.

    Attributes:
        agent: the agent's name.
        session_id: the session.
        turn: the turn about to be sent.
        policy: the policy's name (``drop_oldest``, ``truncate_tool_outputs``, ``compact``, …).
        tokens_before: the prompt estimate before the policy ran.
        tokens_after: the prompt estimate after it.
        limit: the most prompt tokens allowed (window − output reserve − margin).
        messages_before: how many messages the session had before.
        messages_after: how many it has after.
    """

    agent: str
    session_id: str
    turn: int
    policy: str
    tokens_before: int
    tokens_after: int
    limit: int
    messages_before: int
    messages_after: int
    type: Literal["context_trimmed"] = "context_trimmed"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionEvent:
    """Older turns of a session were summarised by a model call.

    Attributes:
        agent: the agent's name.
        session_id: the session.
        turn: the turn about to be sent.
        messages_summarised: how many messages the summary replaced.
        tokens_before: the prompt estimate before compaction.
        tokens_after: the prompt estimate after it (summary included).
        summary_tokens: the summary message's estimate.
        model: the model that wrote the summary.
        trace: the summary request's trace (its usage is what the compaction cost).
    """

    agent: str
    session_id: str
    turn: int
    messages_summarised: int
    tokens_before: int
    tokens_after: int
    summary_tokens: int
    model: str
    trace: TurnTrace
    type: Literal["compaction"] = "compaction"


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetEvent:
    """A fleet-wide budget crossed one of its warning fractions, or ran out.

    Attributes:
        agent: the agent whose turn crossed it.
        session_id: that turn's session.
        turn: that turn.
        budget: ``"tokens"`` or ``"cost"``.
        spent: how much is used so far (tokens, or the cost in the prices' currency).
        limit: the budget.
        fraction: the threshold crossed (``1.0`` when the budget is spent).
        exceeded: whether the budget is spent: no further turn will start.
    """

    agent: str
    session_id: str
    turn: int
    budget: Literal["tokens", "cost"]
    spent: float
    limit: float
    fraction: float
    exceeded: bool
    type: Literal["budget"] = "budget"
