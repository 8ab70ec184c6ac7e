"""Budgets continue on resume: a fleet budget is charged with what the run already spent.

A :class:`~agentflow.context.FleetBudget` counts in memory, so a resumed process starts
it at zero. Before a resumed attempt's sessions start, every turn the store recorded is
charged again — to the budget of the agent that ran it, with the usage the server
reported then, priced as the turn was — so ``max_tokens`` / ``max_cost`` hold for the
whole run, not per attempt. The threshold events those charges cross are not sent
again (they were, when the turns ran).

What is not recorded is not charged: a compaction's summary request (it is no turn),
and the turns another worker records after this one loaded the run. Workers sharing a
run each keep their own in-memory budget, as they would without a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentflow.context._fleet_budget import FleetBudget

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow.store._records import StoredRun

__all__ = ["fleet_budget_of", "recharge"]


def fleet_budget_of(agent: Agent) -> FleetBudget | None:
    """The fleet budget ``agent``'s turns are charged to: its context when that is one,
    else its context's ``fleet``."""
    ctx: Any = agent.context
    if isinstance(ctx, FleetBudget):
        return ctx
    fleet = getattr(ctx, "fleet", None)
    return fleet if isinstance(fleet, FleetBudget) else None


def recharge(run: StoredRun, agents: Mapping[str, Agent]) -> int:
    """Charge every recorded turn of ``run`` to its agent's fleet budget, as it was
    charged when it ran; returns how many turns were charged."""
    charged = 0
    for s in run.sessions:
        agent = agents.get(s.agent)
        budget = fleet_budget_of(agent) if agent is not None else None
        if budget is None:
            continue
        for t in s.turns:
            budget.charge(
                t.trace,
                model=agent.model if agent is not None else None,
                agent=s.agent,
                session_id=s.session_id,
                turn=t.turn,
                emit=_already_sent,
                prompt_estimate=t.prompt.estimated_tokens if t.prompt is not None else 0,
            )
            charged += 1
    return charged


def _already_sent(event: object) -> None:
    """The events of a recharge were sent when the turns ran."""
