"""A cancelled attempt's stored times run from the fleet's own start too: its end
(``RunEnded`` partial: ``agentflow demo --store`` stopped with Ctrl-C, every run cut and
resumed) has no result to read the start from, and it kept the moment read before the
sessions were recorded and claimed. The start comes from the attempt's FleetStartEvent.
On both backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentflow import Event
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import Store, StoredRun, export_report
from tests.store.fleets import after_turn_ends, agents, driver, load_run, stored


def test_a_cancelled_attempts_times_run_from_the_fleets_start(
    make_store: Callable[[], Store],
) -> None:
    ticks = 0

    def clock() -> int:  # time passes at every reading: recording the run takes some
        nonlocal ticks
        ticks += 1
        return loop_clock() + ticks * 1_000_000

    async def main() -> tuple[int, StoredRun, dict[str, Any]]:
        members = agents()
        todo = [members[i % 3].session(f"task {i}", session_id=f"s{i}") for i in range(6)]
        events: list[Event] = []
        cut = await stored(
            make_store(),
            SimTransport(driver()),
            lambda f: f.run(todo, run_id="run-1"),
            cut=after_turn_ends(6),
            events=events,
            clock=clock,
            max_concurrency=4,
        )
        assert cut is None
        start = next(e.start_ns for e in events if e.type == "fleet_start")
        run = await load_run(make_store())
        store = make_store()
        try:
            return start, run, await export_report(store, "run-1")
        finally:
            await store.aclose()

    start, run, report = run_virtual(main())
    (attempt,) = run.attempts
    assert attempt.status == "partial"
    assert attempt.clock_ns == start
    last = max(a["last_s"] for a in report["agents"] if a["last_s"] is not None)
    assert last <= report["fleet"]["duration_s"]
