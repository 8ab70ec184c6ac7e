"""A store SQLite creates has 16 KiB pages (fewer page writes per commit and checkpoint);
a file that already has pages keeps its own size, and a run recorded in it reads back."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentflow.embedded import run_virtual
from agentflow.store._sqlite import PAGE_SIZE

from .fleets import agents, contents, run_cut
from .test_journal import _open_close


def _page_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def test_a_new_store_has_16_kib_pages(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    run_virtual(_open_close(db))
    assert PAGE_SIZE == 16384
    assert _page_size(db) == PAGE_SIZE


def test_an_existing_file_keeps_its_page_size_and_records_a_run(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA page_size=4096")
    # The file now has pages of 4 KiB (a table of agentflow's: another application's
    # database is refused, tests/store/test_other_stores_untouched.py).
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.commit()
    conn.close()
    result = run_virtual(run_cut(db, agents(), 6, None))
    assert result is not None
    assert _page_size(db) == 4096
    stored = contents(db, "run-1")
    assert len(stored["turns"]) == sum(len(s.turns) for s in result.sessions)
