"""A full database (here SQLite's ``max_page_count``, which fails a transaction with
SQLITE_FULL as a full disk does, and rolls it back) is reported as itself: the store's
own ``ROLLBACK`` after it used to raise "cannot rollback - no transaction is active",
which took the real cause's place in ``flush()``'s and ``open()``'s ``StoreError``."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.store import RunStarted, SQLiteStore, _journal

from ..wait import GUARD_S
from .journal_child import tool_result

ROOT = Path(__file__).resolve().parents[2]
FULL = "database or disk is full"


class _Small(SQLiteStore):
    """A store whose connection may grow its file by ``room`` pages at most (set as the
    writer opens it, before a killed writer's journal is ingested)."""

    room = 2

    def _ingest_orphans(self, conn: sqlite3.Connection, *, legacy: bool = True) -> None:
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count={pages + self.room}")
        super()._ingest_orphans(conn, legacy=legacy)


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
def test_a_full_database_at_commit_is_reported_as_full(tmp_path: Path, journal: bool) -> None:
    async def main() -> None:
        store = _Small(tmp_path / "full.db", journal=journal)
        await store.open()
        try:
            store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=1))
            for i in range(400):
                store.write(tool_result(i))
            with pytest.raises(StoreError) as err:
                await store.flush()
            cause = f"{err.value} {err.value.__cause__!r}"
            assert FULL in cause and "cannot rollback" not in cause, cause
            await store.runs()  # the connection is usable: no transaction left open
        finally:
            if journal:  # the batch is held, tried again at close: it fails again
                with pytest.raises(StoreError, match=FULL):
                    await store.aclose()
            else:  # lost, and reported by the flush
                await store.aclose()

    asyncio.run(main())


@pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")
def test_a_full_database_while_ingesting_a_journal_is_reported_as_full(tmp_path: Path) -> None:
    db = tmp_path / "ingest.db"
    done = subprocess.run(
        [sys.executable, "-m", "tests.store.journal_child", "records", str(db), "400", "400"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=GUARD_S,
    )  # fmt: skip
    assert done.returncode == -9, done.stderr[-3000:]

    async def main() -> None:
        store = _Small(db)
        with pytest.raises(StoreError) as err:
            await store.open()
        assert FULL in str(err.value) and "cannot rollback" not in str(err.value)

    asyncio.run(main())
