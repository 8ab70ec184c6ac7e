"""Several stores opening one new database at once (workers started together, two
commands at once) all open it: it used to fail one of them now and then with
"database is locked" (SQLite answers a second opener's switch to WAL at once rather
than wait) or "UNIQUE constraint failed: meta.key" (both wrote the schema version)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentflow.store._schema import SCHEMA_VERSION, check_schema, refuse_other_version

from ..wait import GUARD_S

ROOT = Path(__file__).resolve().parents[2]

OPEN = """
import asyncio, sys, time
from pathlib import Path
from agentflow.store import SQLiteStore
start = float(sys.argv[2])
while time.time() < start:  # all at once
    pass
async def main():
    store = SQLiteStore(Path(sys.argv[1]))
    await store.open()
    await store.aclose()
asyncio.run(main())
"""


def test_stores_opening_a_new_database_at_once_all_open_it(tmp_path: Path) -> None:
    for trial in range(3):
        db = tmp_path / f"new{trial}.db"
        start = time.time() + 1.0  # after every child has imported agentflow
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN, str(db), str(start)],
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        errors = [p.communicate(timeout=GUARD_S)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, errors


def test_two_openers_making_one_new_store_at_once_both_open(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    mine = sqlite3.connect(db, isolation_level=None)
    other = sqlite3.connect(db, isolation_level=None)
    assert refuse_other_version(mine, str(db)) is True  # both found it new ...
    assert refuse_other_version(other, str(db)) is True
    check_schema(other, "other", new=True)  # ... the other made it first
    check_schema(mine, str(db), new=True)
    rows = mine.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    assert rows == [(str(SCHEMA_VERSION),)]
    assert refuse_other_version(mine, str(db)) is False  # a store now
    mine.close()
    other.close()


def test_a_store_being_made_is_seen_whole_or_not_at_all(tmp_path: Path) -> None:
    """The tables and the schema version are made in one transaction: an opener never
    finds agentflow's tables without the version (which, for a file holding other
    tables too, would make it another application's database)."""
    db = tmp_path / "half.db"
    maker = sqlite3.connect(db, isolation_level=None)
    maker.execute("PRAGMA journal_mode=WAL")
    reader = sqlite3.connect(db, isolation_level=None)
    real = maker.execute
    seen: list[list[str]] = []

    class Watched:
        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("INSERT OR IGNORE INTO meta"):  # the tables are made
                rows = reader.execute("SELECT name FROM sqlite_master").fetchall()
                seen.append([r[0] for r in rows])
            return real(sql, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(maker, name)

    check_schema(Watched(), str(db), new=True)  # type: ignore[arg-type]
    assert seen == [[]]
    assert refuse_other_version(reader, str(db)) is False
    maker.close()
    reader.close()
