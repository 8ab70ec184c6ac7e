"""A fleet budget in a context chain continues on resume, as one set alone does: the
resuming process's fresh budget, found among the chain's links, is charged with what the
run spent before the cut (``agentflow/store/_budgets.py`` reads ``ContextChain.fleet``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agentflow import Agent
from agentflow.context import ContextBudget, ContextChain, FleetBudget
from agentflow.store._budgets import fleet_budget_of
from tests.store.fleets import agents
from tests.store.test_resume_budget import PRICES, check_budget_continues


def team(budget: FleetBudget) -> list[Agent]:
    """The store tests' agents, each with a chain: the fleet budget, then a window budget."""
    chain = ContextChain([budget, ContextBudget(window=1_000_000)])
    return [dataclasses.replace(a, context=chain) for a in agents()]


def test_a_chains_fleet_budget_continues_from_what_the_run_spent(tmp_path: Path) -> None:
    budget = FleetBudget(prices=PRICES)
    assert fleet_budget_of(team(budget)[0]) is budget  # found among the chain's links
    check_budget_continues(tmp_path, team)
