"""A fleet budget in a context chain continues on resume, as one set alone does: the
resuming process's fresh budget, found among the chain's links, is charged with what the
run spent before the cut (``agentflow/store/_budgets.py`` reads ``ContextChain.fleets``):
every one of them, where a chain has two."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agentflow import Agent, FleetResult
from agentflow.context import ContextBudget, ContextChain, FleetBudget
from agentflow.embedded import run_virtual
from agentflow.store._budgets import fleet_budgets_of
from tests.store.fleets import agents, resume, run_cut
from tests.store.test_resume_budget import PRICES, N, check_budget_continues


def team(budget: FleetBudget) -> list[Agent]:
    """The store tests' agents, each with a chain: the fleet budget, then a window budget."""
    chain = ContextChain([budget, ContextBudget(window=1_000_000)])
    return [dataclasses.replace(a, context=chain) for a in agents()]


def test_a_chains_fleet_budget_continues_from_what_the_run_spent(tmp_path: Path) -> None:
    budget = FleetBudget(prices=PRICES)
    assert fleet_budgets_of(team(budget)[0]) == (budget,)  # found among the chain's links
    check_budget_continues(tmp_path, team)


def two(per_agent: FleetBudget, fleet_wide: FleetBudget) -> list[Agent]:
    """The store tests' agents, each charging a per-agent budget and a fleet-wide one."""
    chain = ContextChain([per_agent, fleet_wide, ContextBudget(window=1_000_000)])
    return [dataclasses.replace(a, context=chain) for a in agents()]


def test_every_fleet_budget_of_a_chain_continues(tmp_path: Path) -> None:
    """Two fleet budgets in one chain are both charged each turn; resumed, both end
    where the uninterrupted run's end (the second used to restart at zero, and no
    longer bounded the whole run)."""
    whole = FleetBudget(prices=PRICES), FleetBudget(prices=PRICES)
    assert isinstance(
        run_virtual(run_cut(tmp_path / "whole.db", two(*whole), N, None)), FleetResult
    )
    assert whole[0].tokens == whole[1].tokens > 0
    cut = FleetBudget(prices=PRICES), FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "cut.db", two(*cut), N, 20)) is None
    again = FleetBudget(prices=PRICES), FleetBudget(prices=PRICES)
    result = run_virtual(resume(tmp_path / "cut.db", two(*again)))
    assert all(s.status == "completed" for s in result.sessions)
    for budget in again:
        assert (budget.tokens, budget.requests) == (whole[0].tokens, whole[0].requests)
