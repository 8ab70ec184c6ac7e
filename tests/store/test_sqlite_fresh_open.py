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

from agentflow.store._schema import SCHEMA_VERSION, check_schema

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


class _Interleaved:
    """A connection on which another opener writes the schema version right after this
    one found none (the window two openers of a new file share)."""

    def __init__(self, conn: sqlite3.Connection, other: sqlite3.Connection) -> None:
        self.conn, self.other = conn, other
        self.reads = 0

    def executescript(self, sql: str) -> Any:
        return self.conn.executescript(sql)

    def commit(self) -> None:
        self.conn.commit()

    def execute(self, sql: str, *args: Any) -> Any:
        cur = self.conn.execute(sql, *args)
        if sql.startswith("SELECT value FROM meta"):
            self.reads += 1
            if self.reads == 1:
                check_schema(self.other, "other")  # the other opener, now
        return cur


def test_two_openers_writing_the_schema_version_at_once_both_open(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    mine = sqlite3.connect(db, isolation_level=None)
    other = sqlite3.connect(db, isolation_level=None)
    conn = _Interleaved(mine, other)
    check_schema(conn, str(db))  # type: ignore[arg-type]
    assert conn.reads == 2  # it found none, then the other's
    rows = mine.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    assert rows == [(str(SCHEMA_VERSION),)]
    mine.close()
    other.close()
