"""``SQLiteStore.write`` with the journal is safe from several threads at once: every
record is one intact journal frame (a kill at that moment would lose none) and is
committed once. The journal's copy into its mapping is one offset per segment, so
writers that did not exclude each other would copy over each other's frames; and the
zeros written ahead of the records (by the writer thread, or by a writing thread that
gets there first) must never land on a frame copied meanwhile.

Each test forces the interleaving that loses a record when those locks are missing,
rather than hoping threads meet: one thread is stopped at the moment that matters (its
copy has read where its frame goes, or its zeros where they start) until the other has
either been made to wait for the lock or gone through. With the locks the second thread
waits, and nothing is lost; without them it writes there, and a frame is lost every time
(``docs/store-cost.md``, "No batch lock on the loop", was such a change: two threads
copied their frames to the same offset; it was reverted)."""

from __future__ import annotations

import asyncio
import glob
import mmap
import sqlite3
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from agentflow.store import RunStarted, SQLiteStore, _journal, _journal_ingest
from agentflow.store._journal_format import _MAGIC
from agentflow.store._journal_segment import _copy, _fill, _Segment

from ..wait import GUARD_S
from .journal_child import tool_result

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def _journaled_items(db: Path) -> list[object]:
    items: list[object] = []
    for path in sorted(glob.glob(glob.escape(str(db)) + ".af-journal-*")):
        data = Path(path).read_bytes()
        items += [item for _, item in _journal_ingest.frames(data, len(_MAGIC))]
    return items


def _call_ids(items: list[object]) -> list[str]:
    """The call ids of the tool results among journaled ``items`` (their rows)."""
    return sorted(it[1][2] for it in items if type(it) is tuple)


class _Announcing:
    """A lock that sets ``waiting`` when ``who`` is about to take it (whether it then
    waits for it or not)."""

    def __init__(self, lock: Any, waiting: threading.Event) -> None:
        self._lock = lock
        self.waiting = waiting
        self.who: threading.Thread | None = None

    def __enter__(self) -> _Announcing:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.current_thread() is self.who:
            self.waiting.set()
        return bool(self._lock.acquire(blocking, timeout))

    def release(self) -> None:
        self._lock.release()


class _At:
    """A segment as :func:`_journal_segment._copy` sees it, its offset read earlier."""

    def __init__(self, seg: _Segment, offset: int) -> None:
        self.mm, self.offset = seg.mm, offset


def _check(db: Path, journaled: list[object], ids: list[str]) -> None:
    assert _call_ids(journaled) == sorted(ids)  # every record, one intact frame
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT call_id FROM tool_calls ORDER BY call_id").fetchall()
        assert [r[0] for r in rows] == sorted(ids)
        assert conn.execute("SELECT count(*) FROM conflicts").fetchone()[0] == 0
    finally:
        conn.close()


def test_a_thread_writing_while_another_copies_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first thread's copy stops once it has read where its frame goes; a second
    thread then writes. It must wait for the batch lock the first holds (announced as
    it asks for it); had it gone through, it would copy its frame to that same offset,
    and the first's copy would land on it."""
    db = tmp_path / "runs.db"
    real_copy = _copy

    async def main() -> None:
        store = SQLiteStore(db, batch_interval_s=10, max_batch=1 << 20)
        await store.open()
        store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=1))
        journal = store._journal
        assert journal is not None
        met = threading.Event()  # the second thread waits for the lock, or has copied
        lock = _Announcing(store._batch_lock, met)
        store._batch_lock = journal._lock = lock  # type: ignore[assignment]
        first = threading.Thread(target=store.write, args=(tool_result(1),))
        second = threading.Thread(target=store.write, args=(tool_result(2),))
        lock.who = second

        def copy(seg: _Segment, payload: bytes) -> None:
            me = threading.current_thread()
            if me is not first or second.ident is not None:
                real_copy(seg, payload)
                if me is second:
                    met.set()  # (it did not wait: it copied)
                return
            at = seg.offset  # where this frame goes; now the other thread writes
            second.start()
            assert met.wait(GUARD_S)
            at_seg = _At(seg, at)
            real_copy(at_seg, payload)  # type: ignore[arg-type]
            seg.offset = at_seg.offset

        monkeypatch.setattr(_journal, "_copy", copy)
        first.start()
        for th in (first, second):
            await asyncio.to_thread(th.join, GUARD_S)
            assert not th.is_alive()
        journaled = _journaled_items(db)
        await store.aclose()
        _check(db, journaled, ["call-1", "call-2"])

    asyncio.run(main())


def test_zeros_written_ahead_never_land_on_a_frame_copied_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread's :meth:`fill_ahead` stops once it has read where its zeros
    start (the end of what is written); a thread then writes records past that point,
    writing zeros there itself first. It must wait for the fill lock the writer holds
    (announced as it asks for it); had it gone through, its frames there would be
    zeroed by the writer's zeros, written after them."""
    db = tmp_path / "runs.db"
    monkeypatch.setattr(_journal, "FILL_BYTES", mmap.PAGESIZE)  # records soon get past it
    real_fill = _fill
    n = 4 * mmap.PAGESIZE // 200  # tool results (~200 bytes each): past the first page

    async def main() -> None:
        store = SQLiteStore(db, batch_interval_s=10, max_batch=1 << 20)
        await store.open()
        store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=1))
        journal = store._journal
        assert journal is not None
        seg = journal._segments[-1]
        met = threading.Event()  # the writing thread waits for the fill lock, or is past
        lock = _Announcing(journal._fill_lock, met)
        journal._fill_lock = lock  # type: ignore[assignment]
        start: list[int] = []

        def write() -> None:
            for i in range(n):
                store.write(tool_result(i))
                if seg.offset > start[0]:
                    met.set()  # (it did not wait: its frames are past the writer's start)

        writing = threading.Thread(target=write)
        lock.who = writing

        def fill(fd: int, begin: int, end: int) -> None:
            if threading.current_thread() is filling and not start:
                start.append(begin)  # zeros from here on; now the other thread writes
                writing.start()
                assert met.wait(GUARD_S)
            real_fill(fd, begin, end)

        def fill_ahead() -> None:
            # As if 16 pages were journaled since the writer's last commit: it writes
            # 32 pages ahead of the last record.
            journal._journaled_at_fill = journal.journaled - 16 * mmap.PAGESIZE
            journal.fill_ahead()

        filling = threading.Thread(target=fill_ahead)
        monkeypatch.setattr(_journal, "_fill", fill)
        filling.start()
        for th in (filling, writing):
            await asyncio.to_thread(th.join, GUARD_S)
            assert not th.is_alive()
        assert seg.offset > start[0]  # the records went past where the zeros started
        journaled = _journaled_items(db)
        await store.aclose()
        _check(db, journaled, [f"call-{i}" for i in range(n)])

    asyncio.run(main())
