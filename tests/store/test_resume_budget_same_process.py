"""A run cancelled (or failed) and resumed in the same process with the same agents: their
fleet budgets counted the turns before the stop as they ran, and the resume does not
charge them again. It did — the recharge assumed a budget made fresh by a new process —
so the budget counted those turns twice and a resumed run hit a false ``BudgetExceeded``
that the uninterrupted run never reached."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agentflow import Agent, FleetResult
from agentflow.context import FleetBudget, Prices
from agentflow.embedded import SimTransport, run_virtual

from .fleets import after_turn_ends, agents, driver, resume, run_cut, stored

N = 12
PRICES = Prices(prompt=1.0, output=4.0, cached=0.1)


def team(budget: FleetBudget) -> list[Agent]:
    """The store tests' agents, all charging ``budget``."""
    return [dataclasses.replace(a, context=budget) for a in agents()]


def uninterrupted(tmp_path: Path) -> FleetBudget:
    """The budget of the run uncut, for comparison."""
    whole = FleetBudget(prices=PRICES)
    assert isinstance(
        run_virtual(run_cut(tmp_path / "whole.db", team(whole), N, None)), FleetResult
    )
    return whole


def test_a_resume_in_the_same_process_charges_each_turn_once(tmp_path: Path) -> None:
    whole = uninterrupted(tmp_path)
    budget = FleetBudget(prices=PRICES)
    members = team(budget)
    assert run_virtual(run_cut(tmp_path / "cut.db", members, N, 15)) is None
    assert 0 < budget.requests < whole.requests
    result = run_virtual(resume(tmp_path / "cut.db", members))
    assert all(s.status == "completed" for s in result.sessions)
    assert (budget.requests, budget.tokens) == (whole.requests, whole.tokens)


def test_a_budget_the_whole_run_fits_in_is_not_spent_by_the_resume(tmp_path: Path) -> None:
    whole = uninterrupted(tmp_path)
    budget = FleetBudget(prices=PRICES, max_tokens=whole.tokens + 1)
    members = team(budget)
    assert run_virtual(run_cut(tmp_path / "cut.db", members, N, 15)) is None
    result = run_virtual(resume(tmp_path / "cut.db", members))
    assert [s.error for s in result.sessions if s.status != "completed"] == []
    assert budget.exceeded is None


def test_a_resume_cut_and_resumed_again_still_charges_each_turn_once(tmp_path: Path) -> None:
    whole = uninterrupted(tmp_path)
    budget = FleetBudget(prices=PRICES)
    members = team(budget)
    db = tmp_path / "cut.db"
    assert run_virtual(run_cut(db, members, N, 10)) is None
    cut_again = stored(
        db,
        SimTransport(driver()),
        lambda fleet: fleet.resume("run-1", agents=members),
        cut=after_turn_ends(10),
        max_concurrency=4,
    )
    assert run_virtual(cut_again) is None
    result = run_virtual(resume(db, members))
    assert all(s.status == "completed" for s in result.sessions)
    assert (budget.requests, budget.tokens) == (whole.requests, whole.tokens)


def test_a_fresh_budget_still_gets_the_turns_another_budget_counted(tmp_path: Path) -> None:
    first = FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 15)) is None
    whole = uninterrupted(tmp_path)
    fresh = FleetBudget(prices=PRICES)  # as a new process's would be
    run_virtual(resume(tmp_path / "cut.db", team(fresh)))
    assert (fresh.requests, fresh.tokens) == (whole.requests, whole.tokens)
