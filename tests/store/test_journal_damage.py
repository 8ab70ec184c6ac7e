"""A damaged frame in a killed writer's journal: its segment is ingested up to the frame,
and that writer's later segments are kept aside (renamed ``<db>.af-aside-…``, named in a
warning), not ingested — they used to be, leaving a gap (later turns without earlier
ones) that made the resume fail ("turn 0 has later turns but no recorded result")
instead of running the lost tail again."""

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


def _journal_of_600_records(db: Path) -> list[str]:
    """A killed child's journal: run r's start and 600 tool results (turn i), nothing
    committed, in 64 KiB segments; returns the segments."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.store.journal_child", "records", str(db), "600", "600",
         str(64 << 10)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=GUARD_S,
    )  # fmt: skip
    assert done.returncode == -9, done.stderr[-3000:]
    segments = sorted(glob.glob(glob.escape(str(db)) + ".af-journal-*"))
    assert len(segments) >= 3
    return segments


def _open_and_close(db: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(db)
        await store.open()
        await store.aclose()

    asyncio.run(main())


def _turns(db: Path) -> list[int]:
    conn = sqlite3.connect(db)
    try:
        return [t for (t,) in conn.execute("SELECT turn FROM tool_calls ORDER BY turn")]
    finally:
        conn.close()


def test_a_damaged_frame_keeps_the_writers_later_segments_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "j.db"
    segments = _journal_of_600_records(db)
    with open(segments[0], "r+b") as f:  # one byte of a frame mid-segment, as a lost page
        f.seek(30000)
        b = f.read(1)
        f.seek(30000)
        f.write(bytes([b[0] ^ 0xFF]))
    with caplog.at_level(logging.WARNING, logger="agentflow.store"):
        _open_and_close(db)
    turns = _turns(db)
    assert turns == list(range(len(turns)))  # no gap
    assert 0 < len(turns) < 600
    aside = sorted(glob.glob(glob.escape(str(db)) + ".af-aside-*"))
    assert [Path(p).name for p in aside] == [
        Path(p).name.replace(".af-journal-", ".af-aside-") for p in segments
    ]
    assert not glob.glob(glob.escape(str(db)) + ".af-journal-*")
    assert "store.journal_set_aside" in caplog.text and Path(aside[1]).name in caplog.text
    _open_and_close(db)  # a later open leaves them aside too
    assert _turns(db) == turns


def test_an_undamaged_journal_is_ingested_whole_and_nothing_is_kept_aside(
    tmp_path: Path,
) -> None:
    db = tmp_path / "j.db"
    _journal_of_600_records(db)
    _open_and_close(db)
    assert _turns(db) == list(range(600))
    assert not glob.glob(glob.escape(str(db)) + ".af-*")
