"""The SQLite store's journal (its first tier): each batch is appended to a file beside
the database and committed to SQLite in larger transactions. What a ``kill -9`` leaves in
it is ingested by the next open — exactly once, up to a torn last frame — and a live
store's journal is never taken by another opener."""

from __future__ import annotations

import asyncio
import glob
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from agentflow.store import RunStarted, SQLiteStore
from agentflow.store._journal import journal_glob

from ..wait import GUARD_S

#: A child that records ``n`` runs (r0, r1, …) into the store at argv[1] with a journal
#: that is never committed on its own (60 s), prints "ready" once they are all in the
#: journal, and waits to be killed. With argv[3] == "ingest-once", it first records
#: ``n`` runs, commits them (flush) with the journal's reset disabled — as if killed
#: between the commit and emptying the journal — then records ``n`` more.
CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from agentflow.store import RunStarted, SQLiteStore
    from agentflow.store._journal import Journal

    path, n, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    def run(i):
        return RunStarted(run_id=f"r{i}", attempt=0, wall_ns=1000 + i, clock_ns=0, sessions=0)

    async def main():
        store = SQLiteStore(path, ingest_interval_s=60)
        await store.open()
        start = 0
        if mode == "ingest-once":
            Journal.reset = lambda self: None
            for i in range(n):
                store.write(run(i))
            await store.flush()
            start = n
        for i in range(start, start + n):
            store.write(run(i))
            await asyncio.sleep(0.002)
        while store.journaled == 0 or store._batch:
            await asyncio.sleep(0.01)
        print("ready", store.commits, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def _killed_child(db: Path, n: int, mode: str = "plain") -> int:
    """Run the child until it says ready, SIGKILL it; the commits it had made."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(n), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), proc.stderr.read() if proc.stderr else line
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=GUARD_S)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    return int(line.split()[1])


def _rows(db: Path) -> tuple[list[str], int]:
    conn = sqlite3.connect(db)
    try:
        runs = [r for (r,) in conn.execute("SELECT run_id FROM runs ORDER BY created_wall_ns")]
        (conflicts,) = conn.execute("SELECT COUNT(*) FROM conflicts").fetchone()
    finally:
        conn.close()
    return runs, conflicts


async def _open_close(db: Path) -> list[str]:
    store = SQLiteStore(db)
    await store.open()
    try:
        return [r.run_id for r in await store.runs()]
    finally:
        await store.aclose()


def test_a_killed_writers_journal_is_ingested_by_the_next_open(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    commits = _killed_child(db, 20)
    assert commits == 0  # nothing reached SQLite before the kill…
    assert _rows(db) == ([], 0)
    assert len(glob.glob(journal_glob(db))) == 1  # …it is all in the journal
    runs = asyncio.run(_open_close(db))
    assert sorted(runs) == sorted(f"r{i}" for i in range(20))
    assert _rows(db) == ([f"r{i}" for i in range(20)], 0)  # in order, once
    assert glob.glob(journal_glob(db)) == []  # ingested, then deleted
    assert asyncio.run(_open_close(db)) == runs  # a second open finds nothing more


def test_a_journal_committed_but_not_emptied_is_not_ingested_twice(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    commits = _killed_child(db, 10, "ingest-once")
    assert commits == 1
    assert _rows(db) == ([f"r{i}" for i in range(10)], 0)
    asyncio.run(_open_close(db))
    # The first ten were in SQLite and still in the journal: the marker skipped them.
    assert _rows(db) == ([f"r{i}" for i in range(20)], 0)


def test_a_torn_last_frame_ends_the_journal(tmp_path: Path) -> None:
    db = tmp_path / "torn.db"
    _killed_child(db, 8)
    (journal,) = glob.glob(journal_glob(db))
    with open(journal, "ab") as f:
        f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00" + b"partial")  # a write cut short
    asyncio.run(_open_close(db))
    assert _rows(db) == ([f"r{i}" for i in range(8)], 0)
    assert glob.glob(journal_glob(db)) == []


def test_a_live_stores_journal_is_not_taken_and_reads_in_process_see_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "live.db"

    async def main() -> tuple[list[str], list[str], list[str], int, int]:
        live = SQLiteStore(db, ingest_interval_s=60)
        await live.open()
        for i in range(5):
            live.write(
                RunStarted(run_id=f"r{i}", attempt=0, wall_ns=1000 + i, clock_ns=0, sessions=0)
            )
        await asyncio.sleep(0.05)  # the loop's timer appends them to the journal
        journaled, commits = live.journaled, live.commits
        other = SQLiteStore(db)
        await other.open()  # another opener leaves the live journal alone
        before = [r.run_id for r in await other.runs()]
        own = [r.run_id for r in await live.runs()]  # a read commits the journal first
        after = [r.run_id for r in await other.runs()]
        await other.aclose()
        await live.aclose()
        return before, own, after, journaled, commits

    before, own, after, journaled, commits = asyncio.run(main())
    assert journaled >= 1 and commits == 0
    assert before == []
    assert sorted(own) == sorted(after) == [f"r{i}" for i in range(5)]
    assert glob.glob(journal_glob(db)) == []  # a clean close deletes its journal
    conn = sqlite3.connect(db)
    try:  # and its marker
        assert conn.execute("SELECT key FROM meta WHERE key LIKE 'journal:%'").fetchall() == []
    finally:
        conn.close()


def test_the_journal_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    _killed_child(db, 3)
    (journal,) = glob.glob(journal_glob(db))
    assert os.stat(journal).st_mode & 0o777 == 0o600
