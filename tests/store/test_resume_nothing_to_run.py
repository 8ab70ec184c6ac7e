"""Resuming a run that has nothing left to run adds no run time: the no-op attempt's wall
time went into ``run_attempts.wall_s`` (and the resumed result's ``wall_s``), lowering
the run's ``output_tps`` and ``turns_per_s`` a little more at every resume."""

from __future__ import annotations

from pathlib import Path

from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import SQLiteStore, load_result
from tests.store.fleets import agents, driver, load_run, run_cut, stored


def test_a_finished_run_resumed_adds_no_wall_time(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    async def main() -> None:
        members = agents()
        first = await run_cut(db, members, 4, None)
        assert first is not None
        ticks = 0

        def clock() -> int:  # time passes at every reading: the no-op attempt takes some
            nonlocal ticks
            ticks += 1
            return loop_clock() + ticks * 1_000_000

        again = await stored(
            db,
            SimTransport(driver()),
            lambda fleet: fleet.resume("run-1", agents=members),
            clock=clock,
        )
        assert again is not None and ticks > 0
        run = await load_run(db)
        assert [a.wall_s for a in run.attempts] == [first.wall_s, 0.0]
        assert again.wall_s == first.wall_s
        store = SQLiteStore(db)
        try:
            assert (await load_result(store, "run-1")).wall_s == first.wall_s
        finally:
            await store.aclose()

    run_virtual(main())
