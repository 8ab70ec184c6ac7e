"""Review tests of the SQLite store's journal (``store/_journal.py``): what a killed
writer's journal gives the next open must be what the store would have committed."""

from __future__ import annotations

import asyncio
import datetime  # noqa: F401 (the parameters eval it)
import glob
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow.store import SQLiteStore, _journal
from agentflow.store._codec import encode

from ..wait import GUARD_S

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def _child(*args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.journal_review_child", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _killed(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == -9, (proc.returncode, out, err[-3000:])
    return out


def _segments(db: Path) -> list[str]:
    return sorted(glob.glob(glob.escape(str(db)) + ".af-journal-*"))


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def _open_close(db: Path) -> None:
    store = SQLiteStore(db)
    await store.open()
    await store.aclose()


@pytest.mark.parametrize(
    "value",
    [
        "{1: 'x'}",  # a key that is not a str: JSON makes it "1"
        "{'at': datetime.datetime(2026, 1, 1, tzinfo="
        "datetime.timezone(datetime.timedelta(hours=2)))}",
    ],
)
def test_a_killed_sessions_metadata_is_stored_as_without_a_kill(tmp_path: Path, value: str) -> None:
    """Session metadata the store accepts (non-str keys, a datetime in another zone)
    comes out of a killed writer's journal as the store commits it: the next open
    neither fails on it nor stores it differently."""
    db = tmp_path / "meta.db"
    _killed(_child("metadata", str(db), value))
    assert len(_segments(db)) == 1
    asyncio.run(_open_close(db))
    assert _rows(db, "SELECT metadata FROM sessions") == [(encode(eval(value)),)]
    assert _segments(db) == []
