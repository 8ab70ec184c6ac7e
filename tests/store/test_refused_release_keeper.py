"""Which stores' refused release at an attempt's end starts a task renewing the leases
it kept: only one whose release keeps them held (PostgreSQL's, refused while records
wait to be committed). SQLite's gives its run lock back even as its release raises
(the database locked, the disk full): a renewal task started for it renewed leases in
a run another process could now take."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.store import SQLiteStore
from agentflow.store._claims import Ticker
from agentflow.store._recorder import LeaseKeeper


async def test_a_refused_sqlite_release_starts_no_renewal_task(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", busy_timeout_s=0.05)
    await store.open()
    keeper = LeaseKeeper(store, "r", 60.0, Ticker(20.0))
    other = sqlite3.connect(tmp_path / "runs.db", isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # the database locked: the release is refused
        before = asyncio.all_tasks()
        with pytest.raises(StoreError):
            await keeper.release()
        assert asyncio.all_tasks() == before
    finally:
        other.execute("ROLLBACK")
        other.close()
        await store.aclose()
