"""A long-lived budget's counted attempts are known by the run they belong to, not its id
alone: a budget that ran one store's ``run-1`` charged another store's ``run-1``, resumed
in the same process, only the turns of attempts it had not seen a number of (32 of 48
requests). And a resume marks as counted only what it charged: the turns so far of an
attempt that had not ended (killed, or running in another worker), not the attempt."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from agentflow import FleetResult
from agentflow.context import FleetBudget
from agentflow.embedded import run_virtual
from agentflow.store._budgets import recharge
from agentflow.store._records import StoredRun

from .fleets import load_run, resume, run_cut
from .test_resume_budget_same_process import PRICES, N, team


def test_another_stores_run_of_the_same_id_is_charged_whole(tmp_path: Path) -> None:
    whole = FleetBudget(prices=PRICES)
    assert isinstance(
        run_virtual(run_cut(tmp_path / "whole.db", team(whole), N, None)), FleetResult
    )
    other = FleetBudget(prices=PRICES)  # another process's, which ran store C's run-1
    assert run_virtual(run_cut(tmp_path / "c.db", team(other), N, 15)) is None
    budget = FleetBudget(prices=PRICES)  # this process's: it ran store A's run-1 first
    assert isinstance(run_virtual(run_cut(tmp_path / "a.db", team(budget), N, None)), FleetResult)
    before = (budget.requests, budget.tokens)
    result = run_virtual(resume(tmp_path / "c.db", team(budget)))
    assert all(s.status == "completed" for s in result.sessions)
    assert (budget.requests - before[0], budget.tokens - before[1]) == (
        whole.requests,
        whole.tokens,
    )


def test_a_resume_of_an_attempt_still_running_charges_its_later_turns_later(
    tmp_path: Path,
) -> None:
    first = FleetBudget(prices=PRICES)
    assert run_virtual(run_cut(tmp_path / "cut.db", team(first), N, 15)) is None
    run = run_virtual(load_run(tmp_path / "cut.db"))
    assert [a.status for a in run.attempts] == ["partial"]
    # As another worker's attempt, still running, is loaded: not ended, fewer turns.
    early = dataclasses.replace(
        run,
        attempts=[dataclasses.replace(a, status=None, ended_wall_ns=None) for a in run.attempts],
        sessions=[dataclasses.replace(s, turns=s.turns[:1]) for s in run.sessions],
    )
    budget = FleetBudget(prices=PRICES)
    members = {a.name: a for a in team(budget)}
    some = recharge(early, members)
    assert 0 < some < first.requests
    assert budget.counted_attempts == set()
    # Loaded again once it ended: the turns recorded since are charged, no turn twice.
    assert recharge(run, members) == first.requests - some
    assert (budget.requests, budget.tokens) == (first.requests, first.tokens)
    assert recharge(run, members) == 0
    assert budget.counted_attempts == {("run-1", run.created_wall_ns, 0)}


def test_a_store_that_does_not_say_when_a_run_was_created_is_not_charged_twice(
    tmp_path: Path,
) -> None:
    """A store of the user's whose ``StoredRun`` leaves ``created_wall_ns`` unset (the
    documented interface does not ask for it): a run cut and resumed in one process is
    charged once, matched on its id and attempt."""
    from agentflow.embedded import SimTransport
    from agentflow.store import SQLiteStore

    from .fleets import after_turn_ends, driver, stored
    from .test_resume_budget_same_process import uninterrupted

    class OwnStore(SQLiteStore):
        async def load(self, run_id: str, sessions: Sequence[str] | None = None) -> StoredRun:
            run = await super().load(run_id, sessions)
            return dataclasses.replace(run, created_wall_ns=None)

    whole = uninterrupted(tmp_path)
    budget = FleetBudget(prices=PRICES)
    members = team(budget)
    db = tmp_path / "own.db"
    todo = [members[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(N)]
    cut = stored(
        OwnStore(db),
        SimTransport(driver()),
        lambda f: f.run(todo, run_id="run-1"),
        cut=after_turn_ends(15),
        max_concurrency=4,
    )
    assert run_virtual(cut) is None
    again = stored(
        OwnStore(db),
        SimTransport(driver()),
        lambda f: f.resume("run-1", agents=members),
        max_concurrency=4,
    )
    assert isinstance(run_virtual(again), FleetResult)
    assert budget.requests == whole.requests


def test_an_attempt_seen_ended_drops_its_per_turn_record(tmp_path: Path) -> None:
    """A killed attempt's charged turns are kept per session (its last turn), not one
    entry per turn, and forgotten once a later load sees the attempt ended."""
    run_virtual(run_cut(tmp_path / "cut.db", team(FleetBudget(prices=PRICES)), N, 15))
    run = run_virtual(load_run(tmp_path / "cut.db"))
    killed = dataclasses.replace(
        run,
        attempts=[dataclasses.replace(a, status=None, ended_wall_ns=None) for a in run.attempts],
    )
    budget = FleetBudget(prices=PRICES)
    members = {a.name: a for a in team(budget)}
    assert recharge(killed, members) > 0
    (per_session,) = budget.counted_turns.values()
    assert set(per_session) <= {s.session_id for s in run.sessions}
    assert recharge(run, members) == 0  # nothing new, and the attempt has ended now
    assert budget.counted_turns == {}
    assert len(budget.counted_attempts) == 1
