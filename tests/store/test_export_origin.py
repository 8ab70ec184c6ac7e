"""A stored run's report measures time from the fleet's own start, as the live report
does: it measured from the attempt's start as recorded — read before the sessions were
recorded and their leases claimed — so every ``first_s``/``last_s`` and the series were
shifted, and the last turn ended after ``fleet.duration_s``. On both backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentflow import FleetResult
from agentflow.demo.summary import build_report
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import Store, export_report
from tests.store.fleets import agents, driver, load_run, stored


def test_a_stored_reports_times_are_the_live_reports(make_store: Callable[[], Store]) -> None:
    ticks = 0

    def clock() -> int:  # time passes at every reading: recording the run takes some
        nonlocal ticks
        ticks += 1
        return loop_clock() + ticks * 1_000_000

    async def main() -> tuple[FleetResult, dict[str, Any]]:
        members = agents()
        todo = [members[i % 3].session(f"task {i}", session_id=f"s{i}") for i in range(3)]
        live = await stored(
            make_store(), SimTransport(driver()), lambda f: f.run(todo, run_id="run-1"), clock=clock
        )
        assert live is not None and live.start_ns is not None
        run = await load_run(make_store())
        assert run.attempts[0].clock_ns == live.start_ns
        store = make_store()
        try:
            return live, await export_report(store, "run-1")
        finally:
            await store.aclose()

    live, report = run_virtual(main())
    times = {
        a["session_id"]: (a["first_s"], a["last_s"]) for a in build_report(live, run={})["agents"]
    }
    assert {a["session_id"]: (a["first_s"], a["last_s"]) for a in report["agents"]} == times
    assert max(a["last_s"] for a in report["agents"]) <= report["fleet"]["duration_s"]
