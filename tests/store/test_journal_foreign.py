"""A journal segment carries the id of the database it was written for (its header,
AFJ5; the id is kept in ``meta``): a segment left beside a new database at the same path
(the old one removed with its ``-wal`` and ``-shm``) is kept aside, not ingested into it —
it used to be, rows of a run the new database never had. A segment of the earlier format
(no id) is still ingested beside a database that existed before the open (an upgrade with
a killed run loses nothing), but not beside one the open makes."""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow.store import SQLiteStore, _journal

from ..wait import GUARD_S

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def _killed_child(db: Path) -> list[str]:
    """Run r's start and 300 tool results, the first 100 committed, then SIGKILL; the
    segments it left."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.store.journal_child", "records", str(db), "300", "100"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=GUARD_S,
    )  # fmt: skip
    assert done.returncode == -9, done.stderr[-3000:]
    segments = sorted(glob.glob(glob.escape(str(db)) + ".af-journal-*"))
    assert segments
    return segments


def _remove_database(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _open_and_close(db: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(db)
        await store.open()
        await store.aclose()

    asyncio.run(main())


def _count(db: Path, table: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def _aside(db: Path) -> list[str]:
    return sorted(glob.glob(glob.escape(str(db)) + ".af-aside-*"))


def _as_previous_format(segment: str) -> None:
    with open(segment, "r+b") as f:
        f.write(b"AFJ4\0\0\0\0")


def test_a_segment_of_a_removed_database_is_not_ingested_into_a_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "runs.db"
    segments = _killed_child(db)
    _remove_database(db)  # "start afresh"
    with caplog.at_level(logging.WARNING, logger="agentflow.store"):
        _open_and_close(db)
    assert _count(db, "tool_calls") == 0 and _count(db, "runs") == 0
    assert [Path(p).name for p in _aside(db)] == [
        Path(p).name.replace(".af-journal-", ".af-aside-") for p in segments
    ]
    assert "store.journal_set_aside" in caplog.text and "another database" in caplog.text
    _open_and_close(db)  # and not later either
    assert _count(db, "tool_calls") == 0


def test_a_segment_of_its_own_database_is_ingested(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _killed_child(db)
    _open_and_close(db)
    assert _count(db, "tool_calls") == 300 and _aside(db) == []


def test_a_previous_format_segment_is_ingested_beside_an_existing_database(
    tmp_path: Path,
) -> None:
    """An upgrade with a killed run of the previous release: its segments (no id) are
    ingested into the database they were left beside."""
    db = tmp_path / "runs.db"
    for segment in _killed_child(db):
        _as_previous_format(segment)
    _open_and_close(db)
    assert _count(db, "tool_calls") == 300 and _aside(db) == []


def test_a_previous_format_segment_is_not_ingested_into_a_database_the_open_makes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    for segment in _killed_child(db):
        _as_previous_format(segment)
    _remove_database(db)
    _open_and_close(db)
    assert _count(db, "tool_calls") == 0 and len(_aside(db)) == 1


def test_records_written_before_open_are_committed(tmp_path: Path) -> None:
    """Before the writer has opened the database (its id not yet known) a record is not
    journaled: it waits for the first commit, as without a journal."""
    from .journal_child import tool_result

    async def main() -> None:
        store = SQLiteStore(tmp_path / "early.db")
        for i in range(5):
            store.write(tool_result(i))
        await store.open()
        store.write(tool_result(5))
        await store.aclose()

    asyncio.run(main())
    assert _count(tmp_path / "early.db", "tool_calls") == 6
