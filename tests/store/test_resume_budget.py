"""Budgets continue on resume: a fleet budget made fresh in the resuming process is
charged with what the run spent before, so it ends where an uninterrupted run's ends,
and a budget that the earlier attempts spent stops the resumed run at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from agentflow import Agent, Event, FleetResult, StoreError
from agentflow.context import BudgetEvent, FleetBudget, Prices
from agentflow.embedded import run_virtual
from agentflow.store import SQLiteStore
from agentflow.store._budgets import recharge

from .fleets import agents, load_run, resume, run_cut

N = 18
PRICES = Prices(prompt=1.0, output=4.0, cached=0.1)


def team(budget: FleetBudget) -> list[Agent]:
    """The store tests' agents, all charging ``budget``."""
    return [dataclasses.replace(a, context=budget) for a in agents()]


def check_budget_continues(tmp_path: Path, team: Callable[[FleetBudget], list[Agent]]) -> None:
    """A run of ``team(budget)`` cut after 20 turn ends and resumed with a fresh budget:
    the fresh one ends where an uninterrupted run's budget ends."""
    whole = FleetBudget(prices=PRICES)
    assert isinstance(
        run_virtual(run_cut(tmp_path / "whole.db", team(whole), N, None)), FleetResult
    )
    first = FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 20)) is None
    assert 0 < first.tokens < whole.tokens
    again = FleetBudget(prices=PRICES)  # the resuming process's own, starting at zero
    result = run_virtual(resume(tmp_path / "cut.db", team(again), []))
    assert all(s.status == "completed" for s in result.sessions)
    # The turns recorded before the cut were charged again, the new ones once. (The cost
    # differs: the restarted simulator's prefix cache is cold, so the re-run turns had
    # fewer cached tokens than in the uninterrupted run.)
    assert again.tokens == whole.tokens
    assert again.requests == whole.requests


def test_a_fresh_budget_continues_from_what_the_run_spent(tmp_path: Path) -> None:
    check_budget_continues(tmp_path, team)


def test_the_recharge_is_what_the_recorded_turns_cost(tmp_path: Path) -> None:
    first = FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 20)) is None

    fresh = FleetBudget(prices=PRICES)
    members = {a.name: a for a in team(fresh)}
    assert recharge(run_virtual(load_run(tmp_path / "cut.db")), members) == first.requests
    assert (fresh.tokens, fresh.requests) == (first.tokens, first.requests)
    assert fresh.cost == pytest.approx(first.cost)


def test_a_budget_spent_before_the_cut_stops_the_resumed_run(tmp_path: Path) -> None:
    first = FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 20)) is None
    # Resumed with a budget the earlier attempt already used up: no session runs a turn.
    spent = FleetBudget(max_tokens=first.tokens, prices=PRICES)
    events: list[Event] = []
    result = run_virtual(resume(tmp_path / "cut.db", team(spent), events))
    assert not [e for e in events if e.type == "turn_end"]
    unfinished = [s for s in result.sessions if s.status != "completed"]
    assert unfinished and all(s.status == "error" for s in unfinished)
    assert all("budget" in str(s.error) for s in unfinished), [s.error for s in unfinished]
    # The recharge sent no threshold events of its own (they went out when the turns ran).
    assert not [e for e in events if isinstance(e, BudgetEvent)]


def test_a_resume_the_store_refuses_charges_nothing(tmp_path: Path) -> None:
    """A resume refused because another live store writes the run (its run lock) leaves
    the budget as it was: tried again once that writer is gone, the budget ends where
    an uninterrupted run's ends (it used to have the run's spend charged twice)."""
    whole = FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "whole.db", team(whole), N, None)) is not None
    path = tmp_path / "cut.db"
    assert run_virtual(run_cut(path, team(FleetBudget(prices=PRICES)), N, 20)) is None
    again = FleetBudget(prices=PRICES)

    async def main() -> FleetResult:
        holder = SQLiteStore(path)  # another writer of the run: it holds the run lock
        await holder.open()
        await holder.start_attempt("run-1", 0, 0)
        try:
            with pytest.raises(StoreError, match="another live process"):
                await resume(path, team(again))
            assert (again.tokens, again.requests) == (0, 0)
        finally:
            await holder.aclose()
        return await resume(path, team(again))

    result = run_virtual(main())
    assert all(s.status == "completed" for s in result.sessions)
    assert (again.tokens, again.requests) == (whole.tokens, whole.requests)
