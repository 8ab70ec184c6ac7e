"""The SQLite store's journal (``store/_journal.py``): a record is durable against a
``kill -9`` as soon as it is written, before any SQLite commit; the next open commits a
killed writer's journal exactly once; segments rotate and are deleted once committed; a
live store's journal is left alone; a disk that cannot hold a segment falls back to
committing directly."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow._metrics import turn_metrics
from agentflow._trace import TurnTrace
from agentflow.store import (
    LeaseOwner,
    RunStarted,
    SQLiteStore,
    TurnFinished,
    _journal,
    _journal_format,
    _journal_ingest,
)

from ..wait import GUARD_S
from .fleets import agents, contents, resume, run_cut
from .journal_child import tool_result

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def _kill_child(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``journal_child`` with ``args``; it must end by its own SIGKILL."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.store.journal_child", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr[-3000:])
    return done


def _segments(db: Path) -> list[str]:
    return sorted(glob.glob(glob.escape(str(db)) + ".af-journal-*"))


def _count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


async def _open_close(db: Path) -> None:
    store = SQLiteStore(db)
    await store.open()
    await store.aclose()


def test_turns_recorded_before_a_kill_are_kept_without_a_commit(tmp_path: Path) -> None:
    """The child runs a fleet whose writer never commits on its own and kills itself at
    its 7th turn end: SQLite holds no turn, the journal all 7; the next open commits
    them (the same rows an unkilled run has), deletes the journal, and a resume ends
    with the unkilled run's store."""
    ref = tmp_path / "ref.db"
    assert asyncio.run(run_cut(ref, agents(), 6, None)) is not None
    whole = contents(ref, "run-1")

    db = tmp_path / "killed.db"
    _kill_child("fleet", str(db), "7")
    (segment,) = _segments(db)
    assert stat.S_IMODE(os.stat(segment).st_mode) == 0o600
    assert _count(db, "SELECT COUNT(*) FROM turns") == 0  # nothing reached SQLite itself

    asyncio.run(_open_close(db))
    got = contents(db, "run-1")
    assert len(got["turns"]) == 7
    assert set(got["turns"]) <= set(whole["turns"])
    assert set(got["tools"]) <= set(whole["tools"]) and got["tools"]
    assert _segments(db) == []
    assert _count(db, "SELECT COUNT(*) FROM meta WHERE key LIKE 'journal:%'") == 0

    asyncio.run(resume(db, agents()))
    assert contents(db, "run-1") == whole
    assert _count(db, "SELECT COUNT(*) FROM conflicts") == 0


def test_a_journal_is_ingested_from_where_its_last_commit_ended(tmp_path: Path) -> None:
    """The child commits its first 12 records (a flush), writes 18 more and is killed:
    the segment holds all 30, its marker says 12 are in SQLite, and the next open adds
    the other 18 once — no record written twice (that would be a conflict row)."""
    db = tmp_path / "marked.db"
    _kill_child("records", str(db), "30", "12")
    assert len(_segments(db)) == 1
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 12
    asyncio.run(_open_close(db))
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 30
    assert _count(db, "SELECT COUNT(*) FROM conflicts") == 0
    assert _segments(db) == []


def test_a_record_cut_short_ends_the_journal(tmp_path: Path) -> None:
    """A frame whose copy was cut short (its CRC does not match), after 5 intact ones:
    the 5 are committed, the rest ignored, and the store opens."""
    db = tmp_path / "torn.db"
    _kill_child("records", str(db), "5", "99")
    (segment,) = _segments(db)
    with open(segment, "r+b") as f:
        ends = [end for end, _ in _journal_ingest.frames(f.read(), len(_journal_format._MAGIC))]
        assert len(ends) == 6  # the run's start and 5 tool results
        f.seek(ends[-1])
        f.write(_journal_format._FRAME.pack(40, 12345) + b"x" * 20)  # length 40, wrong CRC
    asyncio.run(_open_close(db))
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 5
    assert _segments(db) == []


def test_segments_rotate_and_are_deleted_once_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_journal, "SEGMENT_BYTES", 4096)
    db = tmp_path / "rot.db"

    async def main() -> tuple[int, int, int]:
        store = SQLiteStore(db, batch_interval_s=10)
        await store.open()
        for i in range(40):
            store.write(tool_result(i))
        made = len(_segments(db))
        await store.flush()
        after_flush = len(_segments(db))
        await store.aclose()
        return made, after_flush, len(_segments(db))

    made, after_flush, after_close = asyncio.run(main())
    assert made > 2  # ~500 bytes a record, 4 KiB segments
    assert after_flush == 1  # the one still written
    assert after_close == 0
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 40
    assert _count(db, "SELECT COUNT(*) FROM meta WHERE key LIKE 'journal:%'") == 0


def test_a_live_stores_journal_is_not_taken_by_another_opener(tmp_path: Path) -> None:
    db = tmp_path / "live.db"

    async def main() -> tuple[list[str], list[str]]:
        a = SQLiteStore(db, batch_interval_s=10)
        await a.open()
        a.write(RunStarted(run_id="a", attempt=0, wall_ns=1, clock_ns=0, sessions=0, config=None))
        b = SQLiteStore(db, batch_interval_s=10)
        await b.open()  # scans for orphans: a's segment is locked, so it is a's
        seen_live = [r.run_id for r in await b.runs()]
        await a.aclose()
        seen_after = [r.run_id for r in await b.runs()]
        await b.aclose()
        return seen_live, seen_after

    seen_live, seen_after = asyncio.run(main())
    assert seen_live == []
    assert seen_after == ["a"]
    assert _count(db, "SELECT COUNT(*) FROM conflicts") == 0


def _disk_full(fd: int, data: Any, offset: int) -> int:
    raise OSError(28, "No space left on device")


def test_no_room_for_a_segment_commits_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A segment's blocks are allocated by the zeros written over it (``os.pwrite``, the
    # journal's only use of it): a full disk is an OSError from them, never a SIGBUS.
    monkeypatch.setattr(os, "pwrite", _disk_full)
    db = tmp_path / "full.db"

    async def main() -> tuple[bool, int]:
        store = SQLiteStore(db, batch_interval_s=0.05)
        await store.open()
        for i in range(3):
            store.write(tool_result(i))
        await store.flush()
        journal = store.journal
        await store.aclose()
        return journal, _count(db, "SELECT COUNT(*) FROM tool_calls")

    assert asyncio.run(main()) == (False, 3)
    assert _segments(db) == [] and not glob.glob(str(tmp_path / ".*tmp"))


def _segment_read_back(db: Path) -> tuple[list[Any], int, int]:
    """The items in ``db``'s one journal segment, its allocated bytes and its size."""
    (segment,) = _segments(db)
    data = Path(segment).read_bytes()
    items = [item for _, item in _journal_ingest.frames(data, len(_journal_format._MAGIC))]
    return items, os.stat(segment).st_blocks * 512, len(data)


def test_a_segment_is_written_only_as_far_as_its_records_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment is a hole but for its first ``FILL_BYTES`` (zeros, then records): the
    loop writes zeros itself past them when the writer thread has not, and each record
    is copied only over bytes written before; every record reads back from the segment,
    which holds no more blocks than its records need and ``FILL_BYTES`` ahead."""
    monkeypatch.setattr(_journal, "FILL_BYTES", 16 << 10)
    db = tmp_path / "sparse.db"

    async def main() -> tuple[list[Any], int, int]:
        store = SQLiteStore(db, batch_interval_s=10, max_batch=1 << 20)
        await store.open()
        for i in range(400):  # ~120 KiB of frames: the loop extends the segment ~7 times
            store.write(tool_result(i))
        found = _segment_read_back(db)
        await store.aclose()
        return found

    items, blocks, size = asyncio.run(main())
    assert [it[1][2] for it in items if type(it) is tuple] == [f"call-{i}" for i in range(400)]
    assert size == _journal.SEGMENT_BYTES  # mapped whole
    assert blocks <= 512 << 10  # ~120 KiB of records and what is written ahead: not 8 MiB
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 400


def test_a_full_disk_as_the_loop_extends_a_segment_commits_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while records are journaled: the zeros the loop writes ahead of its
    next record fail, that record and every later one go to SQLite directly, and the
    records journaled before are committed too — nothing is lost."""
    monkeypatch.setattr(_journal, "FILL_BYTES", 16 << 10)
    db = tmp_path / "filling.db"

    async def main() -> tuple[bool, bool]:
        store = SQLiteStore(db, batch_interval_s=10, max_batch=1 << 20)
        await store.open()
        for i in range(20):  # within the segment's first 16 KiB
            store.write(tool_result(i))
        journaled = store.journal
        monkeypatch.setattr(os, "pwrite", _disk_full)
        for i in range(20, 400):
            store.write(tool_result(i))
        await store.flush()
        after = store.journal
        await store.aclose()
        return journaled, after

    assert asyncio.run(main()) == (True, False)
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 400
    assert _segments(db) == [] and not glob.glob(str(tmp_path / ".*tmp"))


def test_defaults_and_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    on = SQLiteStore(tmp_path / "a.db")
    assert (on.journal, on.batch_interval_s) == (True, 5.0)
    off = SQLiteStore(tmp_path / "b.db", journal=False)
    assert (off.journal, off.batch_interval_s) == (False, 0.010)
    assert SQLiteStore(tmp_path / "c.db", batch_interval_s=0).journal is False
    monkeypatch.setattr(_journal, "AVAILABLE", False)
    assert SQLiteStore(tmp_path / "d.db").journal is False
    with pytest.raises(ConfigError, match="journal=True"):
        SQLiteStore(tmp_path / "e.db", journal=True)


def _turn(message: dict[str, Any], turn: int = 0) -> TurnFinished:
    trace = TurnTrace(
        endpoint="e", model="m", response_id=None, sent_ns=1, headers_ns=2, end_ns=5,
        chunk_ns=(3, 4), chunk_chars=(1, 1), chunk_tokens=(), tokens_exact=False, n_events=2,
        content="ab", reasoning="", tool_calls=(), finish_reason="stop", usage=None, done=True,
    )  # fmt: skip
    return TurnFinished(
        run_id="r", session_id="s", turn=turn, attempt=0, message=message, rewrite=None,
        ready_ns=0, trace=trace, metrics=turn_metrics(trace, ready_ns=0), prompt=None,
    )  # fmt: skip


def test_a_turn_is_stored_as_it_was_when_recorded(tmp_path: Path) -> None:
    """The assistant message is a live dict of the session's: with the journal, the row
    is encoded as the turn is recorded, so a later change to the dict (before the commit,
    1 s later) reaches neither the journal nor SQLite."""
    db = tmp_path / "snap.db"

    async def main() -> None:
        store = SQLiteStore(db, batch_interval_s=10)
        await store.open()
        message = {"role": "assistant", "content": "as recorded"}
        store.write(_turn(message))
        message["content"] = "changed later"
        await store.aclose()

    asyncio.run(main())
    conn = sqlite3.connect(db)
    try:
        (stored,) = conn.execute("SELECT message FROM turns").fetchone()
    finally:
        conn.close()
    assert json.loads(stored)["content"] == "as recorded"


@pytest.mark.parametrize("journal", [True, False])
def test_duplicates_in_a_batch_become_conflicts(tmp_path: Path, journal: bool) -> None:
    """Turns and tool results are inserted a group at a time; a group holding keys already
    recorded is written row by row, so each duplicate is a conflict row and the rest are
    stored."""
    db = tmp_path / "dup.db"

    async def main() -> list[str]:
        store = SQLiteStore(db, batch_interval_s=10, journal=journal)
        await store.open()
        for i in range(3):
            store.write(tool_result(i))
        store.write(_turn({"role": "assistant", "content": "t0"}))
        await store.flush()
        for i in range(4):  # three seen, one new
            store.write(tool_result(i))
        store.write(_turn({"role": "assistant", "content": "t0 again"}))
        store.write(_turn({"role": "assistant", "content": "t1"}, turn=1))
        await store.flush()
        found = await store.conflicts("r")
        await store.aclose()
        return found

    found = asyncio.run(main())
    assert sorted(found) == [
        "tool_call s/call-0", "tool_call s/call-1", "tool_call s/call-2", "turn s/0",
    ]  # fmt: skip
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 4
    assert _count(db, "SELECT COUNT(*) FROM turns") == 2


def _spares(db: Path) -> list[str]:
    return glob.glob(glob.escape(str(db.parent / f".{db.name}.af-journal-")) + "*.tmp")


def test_the_writer_makes_the_loops_segment_ahead(tmp_path: Path) -> None:
    """Making a segment costs milliseconds: once the store is open, the writer thread has
    made the next segment (a hidden spare), and the loop's first record only renames it.
    Closing leaves no file; a killed writer's spare is removed by the next open."""
    db = tmp_path / "spare.db"

    async def main() -> tuple[int, int, int, int]:
        store = SQLiteStore(db, batch_interval_s=10)
        await store.open()
        before = len(_spares(db))
        await store.claim("r", ["s"], LeaseOwner(), 60.0)
        ready = len(_spares(db))
        store.write(
            RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0, config=None)
        )
        used = len(_spares(db)), len(_segments(db))
        await store.aclose()
        return before, ready, *used

    assert asyncio.run(main()) == (1, 1, 0, 1)
    assert _spares(db) == [] and _segments(db) == []

    _kill_child("spare", str(db))  # killed with its spare made
    assert len(_spares(db)) == 1
    asyncio.run(_open_close(db))
    assert _spares(db) == [] and _segments(db) == []


def test_a_store_open_before_a_writer_was_killed_ingests_it_on_load(tmp_path: Path) -> None:
    """A store opened first (a long-lived process), then another process records and is
    killed: loading the run — what a resume does first — commits the killed writer's
    journal, so the run is found with all it recorded."""
    db = tmp_path / "long.db"

    async def main() -> int:
        store = SQLiteStore(db)
        await store.open()
        try:
            await asyncio.to_thread(_kill_child, "records", str(db), "5", "99")
            run = await store.load("r")
        finally:
            await store.aclose()
        return len(run.sessions)

    assert asyncio.run(main()) == 0  # run r has no session: its start and tool results
    assert _count(db, "SELECT COUNT(*) FROM tool_calls") == 5
    assert _segments(db) == []


def test_a_failed_journal_falls_back_to_the_batch_paths_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a journal a ``kill -9`` loses up to ``batch_interval_s``: when the journal
    fails, a store on the default interval (the journal's 1 s) goes to the batch path's
    10 ms; one given an interval keeps it."""
    monkeypatch.setattr(os, "pwrite", _disk_full)

    async def main(interval: float | None = None) -> float:
        store = SQLiteStore(tmp_path / f"f{interval}.db", batch_interval_s=interval)
        await store.open()
        store.write(tool_result(0))
        await store.aclose()
        return store.batch_interval_s

    assert asyncio.run(main()) == 0.010
    assert asyncio.run(main(0.5)) == 0.5
