"""A resumed run's peak in flight is the whole run's: ``Fleet.resume``'s result (and so
``agentflow resume --report``) passed on only the last attempt's peak — 2 after a run
that had 4 requests in flight — while ``load_result`` and ``agentflow report --store``
take it from every recorded turn."""

from __future__ import annotations

from pathlib import Path

from agentflow.embedded import run_virtual
from agentflow.store import SQLiteStore, load_result
from tests.store.fleets import agents, resume, run_cut


def test_a_resumed_runs_peak_covers_its_earlier_attempts(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    async def main() -> None:
        whole = await run_cut(tmp_path / "whole.db", agents(), 8, None)
        assert whole is not None and whole.peak_in_flight == 4
        assert await run_cut(db, agents(), 8, 30) is None  # cut late: few sessions left
        resumed = await resume(db, agents())
        store = SQLiteStore(db)
        try:
            stored = await load_result(store, "run-1")
        finally:
            await store.aclose()
        assert stored.peak_in_flight == 4
        assert resumed.peak_in_flight == stored.peak_in_flight

    run_virtual(main())
