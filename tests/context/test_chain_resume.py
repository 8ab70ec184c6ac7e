"""A fleet budget in a context chain continues on resume, as one set alone does: the
resuming process's fresh budget, found among the chain's links, is charged with what the
run spent before the cut (``agentflow/store/_budgets.py`` reads ``ContextChain.fleet``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agentflow import Agent, FleetResult
from agentflow.context import ContextBudget, ContextChain, FleetBudget, Prices
from agentflow.embedded import run_virtual
from agentflow.store._budgets import fleet_budget_of
from tests.store.fleets import agents, resume, run_cut

N = 18
PRICES = Prices(prompt=1.0, output=4.0, cached=0.1)


def team(budget: FleetBudget) -> list[Agent]:
    """The store tests' agents, each with a chain: the fleet budget, then a window budget."""
    chain = ContextChain([budget, ContextBudget(window=1_000_000)])
    return [dataclasses.replace(a, context=chain) for a in agents()]


def test_a_chains_fleet_budget_continues_from_what_the_run_spent(tmp_path: Path) -> None:
    whole = FleetBudget(prices=PRICES)
    assert fleet_budget_of(team(whole)[0]) is whole
    assert isinstance(
        run_virtual(run_cut(tmp_path / "whole.db", team(whole), N, None)), FleetResult
    )
    first = FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 20)) is None
    assert 0 < first.tokens < whole.tokens
    again = FleetBudget(prices=PRICES)  # the resuming process's own, starting at zero
    result = run_virtual(resume(tmp_path / "cut.db", team(again), []))
    assert all(s.status == "completed" for s in result.sessions)
    assert again.tokens == whole.tokens
    assert again.requests == whole.requests
