"""``SQLiteStore.write`` with the journal is safe from several threads at once: every
record is one intact journal frame (a kill at that moment would lose none) and is
committed once. The journal's copy into its mapping is one offset per segment, so
writers that did not exclude each other would copy over each other's frames."""

from __future__ import annotations

import asyncio
import glob
import mmap
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

from agentflow.store import RunStarted, SQLiteStore, _journal, _journal_ingest
from agentflow.store._journal_format import _MAGIC

from ..wait import GUARD_S
from .journal_child import tool_result

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")

THREADS, EACH = 4, 300


def _journaled_items(db: Path) -> list[object]:
    items: list[object] = []
    for path in sorted(glob.glob(glob.escape(str(db)) + ".af-journal-*")):
        data = Path(path).read_bytes()
        items += [item for _, item in _journal_ingest.frames(data, len(_MAGIC))]
    return items


@pytest.mark.parametrize("filling", [False, True], ids=["written-ahead", "filled-meanwhile"])
def test_threads_writing_at_once_lose_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filling: bool
) -> None:
    """``filling``: segments are written with zeros a page at a time, by the writing
    threads themselves and by a thread doing the writer thread's :meth:`fill_ahead`
    all the while: the zeros never land on a frame copied meanwhile."""
    db = tmp_path / "runs.db"
    if filling:
        monkeypatch.setattr(_journal, "FILL_BYTES", mmap.PAGESIZE)

    async def main() -> None:
        # The records fit in the journal's first segment, which a commit does not delete
        # (only the segments before the one written are): it holds every frame written.
        store = SQLiteStore(db, batch_interval_s=10, max_batch=1 << 20)
        await store.open()
        store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=1))
        start = threading.Barrier(THREADS)

        def writer(t: int) -> None:
            start.wait(GUARD_S)
            for i in range(EACH):
                store.write(tool_result(t * EACH + i))

        done = threading.Event()

        def filler() -> None:
            journal = store._journal
            assert journal is not None
            while not done.is_set():
                # As if 4 pages were journaled since its last run: it writes 8 ahead, so
                # that it, not the threads, writes most pages, as the records come.
                journal._journaled_at_fill = journal.journaled - 4 * mmap.PAGESIZE
                journal.fill_ahead()

        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads interleave between bytecodes, often
        try:
            threads = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
            fill = threading.Thread(target=filler) if filling else None
            for th in [*threads, *([fill] if fill else [])]:
                th.start()
            for th in threads:
                await asyncio.to_thread(th.join, GUARD_S)
                assert not th.is_alive()
        finally:
            done.set()
            sys.setswitchinterval(switch)
        if fill is not None:
            await asyncio.to_thread(fill.join, GUARD_S)
        journaled = _journaled_items(db)
        await store.aclose()
        ids = sorted(it[1][2] for it in journaled if type(it) is tuple)  # tool rows: call ids
        assert ids == sorted(f"call-{i}" for i in range(THREADS * EACH))

    asyncio.run(main())
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == THREADS * EACH
        assert conn.execute("SELECT count(*) FROM conflicts").fetchone()[0] == 0
    finally:
        conn.close()
