"""Review tests of SQLiteStore's failure paths: a killed writer's record that SQLite
cannot bind, a record whose encoding raises something unusual, a commit that fails
for a reason other than a lock, and a store closed while a call was on its way. Each
used to hang, raise from ``write``, or lose records without a word."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from agentflow import RecordsLeftOut, StoreError
from agentflow.store import SQLiteStore, _journal, _sqlite_write

from ..wait import GUARD_S
from .journal_child import tool_result
from .journal_review_child import start
from .test_journal import _turn
from .test_journal_review import _child, _killed, _rows


@pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")
def test_a_killed_writers_record_sqlite_cannot_bind_is_left_out_at_the_next_open(
    tmp_path: Path,
) -> None:
    """MessagePack takes an integer past 64 bits, SQLite cannot bind it: the next open
    ingests the killed writer's journal without that record and its first flush names
    it (the open used to hang, its writer thread dead, and so did every later one)."""
    db = tmp_path / "big.db"
    _killed(_child("overflow", str(db)))

    async def main() -> RecordsLeftOut:
        store = SQLiteStore(db)
        await asyncio.wait_for(store.open(), GUARD_S)
        with pytest.raises(RecordsLeftOut) as info:
            await asyncio.wait_for(store.flush(), GUARD_S)
        await store.aclose()  # the flush reported it: once
        return info.value

    error = asyncio.run(main())
    assert [name for name, _ in error.lost] == ["tool call s/call-1 of run r"]
    assert isinstance(error.lost[0][1], OverflowError)
    assert _rows(db, "SELECT call_id FROM tool_calls ORDER BY turn") == [
        ("call-0",),
        ("call-2",),
    ]
    assert list(tmp_path.glob("big.db.af-journal-*")) == []  # ingested, then deleted


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
def test_a_turn_whose_encoding_raises_is_left_out_not_raised_by_write(
    tmp_path: Path, journal: bool
) -> None:
    """A turn's message holds an object whose ``repr`` raises RuntimeError: ``write``
    (on the event loop, in the recorder) does not raise — with the journal it used to,
    dropping the record — and the next flush names it as left out."""
    db = tmp_path / "repr.db"

    async def main() -> RecordsLeftOut:
        store = SQLiteStore(db, journal=journal)
        await store.open()
        store.write(start())
        store.write(tool_result(0))
        turn = _turn({"role": "assistant", "content": "x", "odd": _ReprRaises()})
        store.write(turn)
        store.write(tool_result(1))
        with pytest.raises(RecordsLeftOut) as info:
            await store.flush()
        await store.aclose()  # the flush reported it: once
        return info.value

    error = asyncio.run(main())
    assert [name for name, _ in error.lost] == ["turn s/0 of run r"]
    assert "no repr" in str(error)
    assert _rows(db, "SELECT call_id FROM tool_calls ORDER BY turn") == [
        ("call-0",),
        ("call-1",),
    ]


@pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")
def test_a_commit_failing_on_a_damaged_database_keeps_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit fails with an error of SQLite's other than a lock (here a DatabaseError,
    as a damaged page gives): with the journal its records are kept and committed first
    by the next commit, as after a lock (they used to be lost, the journal's marker then
    moved past them)."""
    db = tmp_path / "damaged.db"
    real = _sqlite_write.write_records
    calls = [0]

    def write_records(conn: sqlite3.Connection, items: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:  # the batch after the first
            raise sqlite3.DatabaseError("database disk image is malformed")
        real(conn, items)

    monkeypatch.setattr(_sqlite_write, "write_records", write_records)

    async def main() -> None:
        store = SQLiteStore(db)
        await store.open()
        store.write(start())
        await store.flush()
        store.write(tool_result(0))
        # (This flush reports the failure unless its own commit, apart from the batch's,
        # committed the kept batch first: either way nothing is lost.)
        with contextlib.suppress(StoreError):
            await store.flush()
        assert calls[0] >= 2  # the second commit failed as scripted
        store.write(tool_result(1))
        await store.flush()  # the kept batch first: nothing lost, no error left
        await store.aclose()

    asyncio.run(main())
    assert _rows(db, "SELECT call_id FROM tool_calls ORDER BY turn") == [
        ("call-0",),
        ("call-1",),
    ]


def test_a_call_on_its_way_when_the_store_closes_says_it_is_closed(tmp_path: Path) -> None:
    """Another thread closes the store between a flush's check that it is open and the
    moment the flush is queued: the flush says the store is closed (it used to be queued
    after the writer had stopped, and wait forever)."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "c.db")
        await store.open()
        real = store._start

        def start_then_closed() -> None:
            real()
            store.close()  # what another thread does at this instant

        store._start = start_then_closed  # type: ignore[method-assign]
        with pytest.raises(StoreError, match="the store is closed"):
            await asyncio.wait_for(store.flush(), GUARD_S)

    asyncio.run(main())


@pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")
def test_a_segment_removed_before_it_was_locked_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another store opening the database cleans up segments being made when their
    process died: one that is being made right now, not yet locked, looks the same. The
    store makes another and keeps its journal (it used to turn the journal off for good:
    a ``kill -9`` then lost records)."""
    real = _journal.fcntl.flock  # type: ignore[attr-defined]
    removed: list[str] = []

    def flock(fd: int, op: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".tmp") and not removed:  # the other opener's cleanup, now
            os.unlink(path)
            removed.append(path)
        real(fd, op)

    monkeypatch.setattr(_journal.fcntl, "flock", flock)  # type: ignore[attr-defined]

    async def main() -> bool:
        store = SQLiteStore(tmp_path / "t.db")
        await store.open()
        store.write(start())
        store.write(tool_result(0))
        journal = store.journal
        await store.aclose()
        return journal

    assert asyncio.run(main()) is True
    assert removed
    assert _rows(tmp_path / "t.db", "SELECT call_id FROM tool_calls") == [("call-0",)]


@pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")
def test_a_writer_that_fails_on_its_own_keeps_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread fails on its own (a bug): the flush it was running says so (it
    waited forever: its call was out of the queue the failure drains), and the batches
    dropped are only in the journal, so the journal is kept and the next open commits
    them (it was deleted as if the store had closed cleanly)."""
    db = tmp_path / "bug.db"

    async def main() -> None:
        store = SQLiteStore(db)
        await store.open()

        def broken(conn: Any, batch: Any) -> bool:
            raise RuntimeError("a bug in the writer")

        # Broken before the records are written: the writer thread may take a batch at
        # any moment after a write (a busy machine let it commit them first).
        monkeypatch.setattr(store, "_run_batch", broken)
        store.write(start())
        store.write(tool_result(0))
        with pytest.raises(StoreError, match="writer thread failed"):
            await asyncio.wait_for(store.flush(), GUARD_S)
        await store.aclose()
        monkeypatch.undo()
        again = SQLiteStore(db)
        await again.open()
        await again.aclose()

    asyncio.run(main())
    assert _rows(db, "SELECT call_id FROM tool_calls") == [("call-0",)]


@pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")
def test_closing_a_store_whose_writer_failed_waits_for_the_thread_to_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aclose() of a store whose writer thread failed waits for that thread to let go of
    the journal and the connection, as a clean close does. It returned at once: a store
    opened next on the file could find the journal still held (by the thread, still
    closing it), take it for a live writer's and leave its records out — CI saw it. The
    thread is made slow to let go here, so that returning early is seen every time."""
    db = tmp_path / "slow.db"
    let_go: list[bool] = []

    async def main() -> None:
        store = SQLiteStore(db)
        await store.open()
        close_journal = store._close_journal

        def slow_close(conn: Any, *, delete: bool) -> None:
            time.sleep(0.3)  # (only slows the thread: nothing waits on the clock)
            close_journal(conn, delete=delete)
            let_go.append(delete)

        def broken(conn: Any, batch: Any) -> bool:
            raise RuntimeError("a bug in the writer")

        monkeypatch.setattr(store, "_close_journal", slow_close)
        monkeypatch.setattr(store, "_run_batch", broken)
        store.write(start())
        with pytest.raises(StoreError, match="writer thread failed"):
            await asyncio.wait_for(store.flush(), GUARD_S)
        await asyncio.wait_for(store.aclose(), GUARD_S)
        assert let_go == [False]  # the journal kept, and let go of before aclose returned
        store.close()  # (the same, without an event loop: nothing left to wait for)

    asyncio.run(main())
