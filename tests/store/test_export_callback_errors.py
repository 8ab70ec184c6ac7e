"""``fleet.errors.callback`` of a report read from a run store: a store keeps no
callback's failures, so it is ``null`` (not measured) — ``agentflow report --store`` said
0 for a run whose callback failed 3 times (its journal, rebuilt from the record, passed
for one that had seen every callback error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentflow import Agent, Event, Fleet, FleetResult, TurnEndEvent
from agentflow.embedded import loop_clock, run_virtual
from agentflow.stats import FleetStats, RunJournal
from agentflow.store import SQLiteStore, StoredRun, export_report
from agentflow.testing import MockTransport, Reply
from tests.stats.test_report_schema import validate


def bad(event: Event) -> None:
    if isinstance(event, TurnEndEvent):
        raise ValueError("oops")


def _run(db: Path, *callbacks: Any) -> tuple[FleetResult, StoredRun, dict[str, Any]]:
    async def main() -> tuple[FleetResult, StoredRun, dict[str, Any]]:
        async with SQLiteStore(db) as store:
            fleet = Fleet(
                MockTransport(lambda r: Reply.text("hi"), clock=loop_clock),
                clock=loop_clock,
                store=store,
                callbacks=[*callbacks, bad],
            )
            agent = Agent(name="a", model="m")
            sessions = [agent.session("go", session_id=f"s{i}") for i in range(3)]
            result = await fleet.run(sessions, run_id="r1")
            return result, await store.load("r1"), await export_report(store, "r1")

    return run_virtual(main())


def test_a_stored_runs_callback_errors_are_not_measured(tmp_path: Path) -> None:
    live, journal = FleetStats(clock=loop_clock), RunJournal(loop_clock)
    result, run, stored = _run(tmp_path / "r.db", live, journal)
    assert live.report()["fleet"]["errors"]["callback"] == 3
    # the run's own journal saw them
    seen = FleetStats.from_result(result, journal=journal).report()["fleet"]["errors"]
    assert seen["callback"] == 3
    validate(stored)
    assert stored["fleet"]["errors"]["callback"] is None  # it said 0
    # a journal given the store's record knows none of them either
    journal.add_stored(run)
    assert not journal.callbacks
    rebuilt = FleetStats.from_result(result, journal=journal).report()
    assert rebuilt["fleet"]["errors"]["callback"] is None
