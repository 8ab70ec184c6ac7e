"""Budgets continue on resume: a fleet budget made fresh in the resuming process is
charged with what the run spent before, so it ends where an uninterrupted run's ends,
and a budget that the earlier attempts spent stops the resumed run at once."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from agentflow import Agent, BudgetEvent, Event, Fleet, FleetResult, SQLiteStore
from agentflow.context import FleetBudget, Prices
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store._budgets import recharge
from agentflow.store._records import StoredRun

from .fleets import agents, driver

N = 18
PRICES = Prices(prompt=1.0, output=4.0, cached=0.1)


def team(budget: FleetBudget) -> list[Agent]:
    """The store tests' agents, all charging ``budget``."""
    return [dataclasses.replace(a, context=budget) for a in agents()]


async def _run(path: Path, budget: FleetBudget, stop_after: int | None) -> FleetResult | None:
    transport = SimTransport(driver())
    store = SQLiteStore(path)
    ended = 0
    task: asyncio.Task[FleetResult] | None = None

    def count(event: Event) -> None:
        nonlocal ended
        if event.type == "turn_end":
            ended += 1
            if ended == stop_after and task is not None:
                task.cancel()

    members = team(budget)
    sessions = [members[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(N)]
    fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=store, callbacks=[count])
    try:
        task = asyncio.ensure_future(fleet.run(sessions, run_id="run-1"))
        try:
            return await task
        except asyncio.CancelledError:
            return None
    finally:
        await store.aclose()
        await transport.aclose()


async def _resume(path: Path, budget: FleetBudget, events: list[Event]) -> FleetResult:
    transport = SimTransport(driver())
    store = SQLiteStore(path)
    fleet = Fleet(
        transport, max_concurrency=4, clock=loop_clock, store=store, callbacks=[events.append]
    )
    try:
        return await fleet.resume("run-1", agents=team(budget))
    finally:
        await store.aclose()
        await transport.aclose()


def test_a_fresh_budget_continues_from_what_the_run_spent(tmp_path: Path) -> None:
    whole = FleetBudget(prices=PRICES)
    assert isinstance(run_virtual(_run(tmp_path / "whole.db", whole, None)), FleetResult)
    first = FleetBudget(prices=PRICES)
    assert run_virtual(_run(tmp_path / "cut.db", first, 20)) is None
    assert 0 < first.tokens < whole.tokens
    again = FleetBudget(prices=PRICES)  # the resuming process's own, starting at zero
    result = run_virtual(_resume(tmp_path / "cut.db", again, []))
    assert all(s.status == "completed" for s in result.sessions)
    # The turns recorded before the cut were charged again, the new ones once. (The cost
    # differs: the restarted simulator's prefix cache is cold, so the re-run turns had
    # fewer cached tokens than in the uninterrupted run.)
    assert again.tokens == whole.tokens
    assert again.requests == whole.requests


def test_the_recharge_is_what_the_recorded_turns_cost(tmp_path: Path) -> None:
    first = FleetBudget(prices=PRICES)
    assert run_virtual(_run(tmp_path / "cut.db", first, 20)) is None

    async def load() -> StoredRun:
        store = SQLiteStore(tmp_path / "cut.db")
        try:
            await store.open()
            return await store.load("run-1")
        finally:
            await store.aclose()

    fresh = FleetBudget(prices=PRICES)
    members = {a.name: a for a in team(fresh)}
    assert recharge(run_virtual(load()), members) == first.requests
    assert (fresh.tokens, fresh.requests) == (first.tokens, first.requests)
    assert fresh.cost == pytest.approx(first.cost)


def test_a_budget_spent_before_the_cut_stops_the_resumed_run(tmp_path: Path) -> None:
    first = FleetBudget(prices=PRICES)
    assert run_virtual(_run(tmp_path / "cut.db", first, 20)) is None
    # Resumed with a budget the earlier attempt already used up: no session runs a turn.
    spent = FleetBudget(max_tokens=first.tokens, prices=PRICES)
    events: list[Event] = []
    result = run_virtual(_resume(tmp_path / "cut.db", spent, events))
    assert not [e for e in events if e.type == "turn_end"]
    unfinished = [s for s in result.sessions if s.status != "completed"]
    assert unfinished and all(s.status == "error" for s in unfinished)
    assert all("budget" in str(s.error) for s in unfinished), [s.error for s in unfinished]
    # The recharge sent no threshold events of its own (they went out when the turns ran).
    assert not [e for e in events if isinstance(e, BudgetEvent)]
