"""Budgets continue on resume: a fleet budget is charged with what the run already spent.

A :class:`~agentflow.context.FleetBudget` counts in memory, so a resumed process starts
it at zero. Before a resumed attempt's sessions start, every turn the store recorded is
charged again — to every fleet budget of the agent that ran it (each link of its chain
that is one), with the usage the server reported then, priced as the turn was — so
``max_tokens`` / ``max_cost`` hold for the whole run, not per attempt. The threshold
events those charges cross are not sent again (they were, when the turns ran).

A budget that counted an attempt's turns already is not charged them again: the run was
cancelled or failed in this process, then resumed here with the same agents (their budgets
counted the turns as they ran: :func:`counting_live`), or resumed here before (the recharge
counted them: all of an attempt that had ended, only the turns it charged of one that had
not — killed, or still running in another worker). An attempt is known by the run's id, the
run's creation time (``StoredRun.created_wall_ns``: another store's run of the same id is
another run) and its number.

A turn the server sent no prompt count for is charged the estimate it was charged live:
the chain's ``ContextBudget``'s, recorded with the turn, or without one the rough count (4
characters a token) of its prompt, rebuilt from the record as it was sent.

What is not recorded is not charged: a compaction's summary request (it is no turn),
and the turns another worker records after this one loaded the run. Workers sharing a
run each keep their own in-memory budget, as they would without a store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow._context_chain import ContextChain
from agentflow._session_turn import _rough_tokens
from agentflow.context._budget import ContextBudget
from agentflow.context._fleet_budget import FleetBudget
from agentflow.store._resume import turn_prompts

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow._session import Session
    from agentflow.store._records import StoredRun, StoredSession, StoredTurn

__all__ = ["counting_live", "fleet_budgets_of", "recharge"]


def fleet_budgets_of(agent: Agent) -> tuple[FleetBudget, ...]:
    """The fleet budgets ``agent``'s turns are charged to, in its chain's order: its
    context when that is one, else every one of its context's links that is one (a
    per-agent budget and a fleet-wide one, say; or a ``ContextBudget``'s ``fleet=``)."""
    ctx: Any = agent.context
    return () if ctx is None else ContextChain.of(ctx).fleets


def recharge(run: StoredRun, agents: Mapping[str, Agent]) -> int:
    """Charge every recorded turn of ``run`` to each of its agent's fleet budgets, as it
    was charged when it ran; returns how many turns were charged."""
    charged = 0
    run_id, created = run.run_id, run.created_wall_ns
    # An attempt that had not ended (killed, or running in another worker) may record
    # more turns after this load: only the turns charged now are marked counted.
    ended = {a.attempt for a in run.attempts if a.status is not None}
    for s in run.sessions:
        agent = agents.get(s.agent)
        budgets = fleet_budgets_of(agent) if agent is not None else ()
        if agent is None or not budgets:
            continue
        for t, estimate in _prompt_estimates(run, s, agent):
            key = (run_id, created, t.attempt)
            to = [
                b
                for b in budgets
                if not _attempt_counted(b, key)
                and t.turn > b.counted_turns.get(key, {}).get(s.session_id, -1)
            ]
            if not to:
                continue
            for budget in to:
                budget.charge(
                    t.trace,
                    model=agent.model,
                    agent=s.agent,
                    session_id=s.session_id,
                    turn=t.turn,
                    emit=_already_sent,
                    prompt_estimate=estimate,
                )
                if t.attempt not in ended:
                    budget.counted_turns.setdefault(key, {})[s.session_id] = t.turn
            charged += 1
    # Every ended attempt's turns are counted now, by each budget of these agents (its
    # per-turn record, from a resume while it ran, is no longer needed).
    attempts = {(run_id, created, t.attempt) for s in run.sessions for t in s.turns}
    attempts = {k for k in attempts if k[2] in ended}
    for agent in agents.values():
        for budget in fleet_budgets_of(agent):
            budget.counted_attempts |= attempts
            for key in attempts:
                budget.counted_turns.pop(key, None)
    return charged


def _attempt_counted(budget: FleetBudget, key: tuple[str, int | None, int]) -> bool:
    """Whether ``budget`` counted attempt ``key`` (run id, creation time, attempt) whole.
    A store that does not say when a run was created (``created_wall_ns`` None: a store
    of the user's) matches on the run id and attempt alone."""
    if key in budget.counted_attempts:
        return True
    if key[1] is None:
        return any(k[0] == key[0] and k[2] == key[2] for k in budget.counted_attempts)
    return False


def counting_live(
    run_id: str, created_wall_ns: int | None, attempt: int, sessions: Iterable[Session]
) -> None:
    """Attempt ``attempt`` at ``run_id`` (created at ``created_wall_ns``) runs
    ``sessions`` in this process: their agents' fleet budgets count its turns as they
    run, so a resume here does not charge them again. (Not for sessions run in worker
    processes: there each worker's copy of a budget counts, not this process's.)"""
    agents = {id(s.agent): s.agent for s in sessions}
    for agent in agents.values():
        for budget in fleet_budgets_of(agent):
            budget.counted_attempts.add((run_id, created_wall_ns, attempt))


def _prompt_estimates(
    run: StoredRun, s: StoredSession, agent: Agent
) -> Iterator[tuple[StoredTurn, int]]:
    """Each recorded turn of ``s`` with the prompt estimate a fleet budget charged it live
    (used where the server gave no prompt count): the estimate of the chain's
    ``ContextBudget``, recorded with the turn; without one, the same rough count (4
    characters a token) of the prompt as sent, rebuilt from the record."""
    if any(isinstance(link, ContextBudget) for link in _links(agent)):
        for t in s.turns:
            yield t, t.prompt.estimated_tokens if t.prompt is not None else 0
        return
    if all(_counted(t) for t in s.turns):
        for t in s.turns:
            yield t, 0
        return
    tools = agent.tool_specs
    tool_chars = len(msgspec.json.encode(list(tools))) if tools else 0
    for t, prompt in turn_prompts(run, s):
        yield t, 0 if _counted(t) else _rough_tokens(prompt, tool_chars)


def _counted(t: StoredTurn) -> bool:
    """Whether the server gave the turn's prompt count (then no estimate is charged)."""
    usage = t.trace.usage
    return usage is not None and usage.prompt_tokens is not None


def _links(agent: Agent) -> tuple[object, ...]:
    ctx: Any = agent.context
    return () if ctx is None else ContextChain.of(ctx).links


def _already_sent(event: object) -> None:
    """The events of a recharge were sent when the turns ran."""
