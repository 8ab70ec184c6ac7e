"""A resume that fails after its attempt started (``DurableRun.resumed`` raising between
``start_attempt`` and the attempt's plan being built) ends that attempt: its run lock
used to stay held until the store closed, and every later resume through the store was
refused ("being written by another attempt through this store")."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentflow import Fleet
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import SQLiteStore, _durable
from agentflow.store._durable import DurableRun

from .fleets import agents, driver, run_cut


def _attempts(db: Path) -> list[tuple[int, str | None]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT attempt, status FROM run_attempts WHERE run_id='run-1' ORDER BY attempt"
        )
        return list(rows)
    finally:
        conn.close()


def test_a_resume_that_fails_once_started_lets_the_next_one_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "cut.db"
    assert run_virtual(run_cut(db, agents(), 3, 4)) is None
    members = agents()

    def broken(*args: Any) -> int:  # a fault once the attempt is the store's
        raise RuntimeError("cannot charge the budget")

    async def main() -> int:
        store = SQLiteStore(db)
        transport = SimTransport(driver())
        try:
            with monkeypatch.context() as patch:
                patch.setattr(_durable, "recharge", broken)
                with pytest.raises(RuntimeError, match="cannot charge"):
                    await DurableRun.resumed(
                        store, "run-1", members, clock=loop_clock, lease_ttl_s=30.0, window=8
                    )
            fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=store)
            result = await fleet.resume("run-1", agents=members)  # through the same store
            return len(result.sessions)
        finally:
            await store.aclose()
            await transport.aclose()

    assert run_virtual(main()) == 3
    # The failed attempt is recorded as ended (partial), the next one as finished.
    assert _attempts(db) == [(0, "partial"), (1, "partial"), (2, "finished")]
