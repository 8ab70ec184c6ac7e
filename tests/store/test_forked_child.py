"""A forked child (a ``multiprocessing`` fork worker) and the stores its parent made: one
the parent opened is the parent's — every use in the child is a StoreError saying so
(writes used to queue records nobody would commit, and a flush waited forever); one
the parent never opened is the child's to open and use."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.store import SQLiteStore, _journal, _journal_segment

from ..wait import GUARD_S
from .journal_child import tool_result
from .journal_review_child import start

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here"),
    # (Python 3.12+ warns of fork() in a process with threads: that is the point here.)
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


def _in_child(body: object) -> int:
    """Run ``body()`` in a forked child; its exit status (0: it returned)."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            body()  # type: ignore[operator]
            code = 0
        except BaseException as exc:
            print(f"child: {exc!r}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    deadline = time.monotonic() + GUARD_S  # (a liveness bound, not a timing check)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not end within {GUARD_S} s")
        time.sleep(0.01)


def test_a_store_the_parent_opened_says_so_in_the_child(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    store = SQLiteStore(db)
    asyncio.run(store.open())
    store.write(start())
    asyncio.run(store.flush())

    def child() -> None:
        with pytest.raises(StoreError, match="not by this forked child"):
            store.write(tool_result(9))
        with pytest.raises(StoreError, match="not by this forked child"):
            asyncio.run(asyncio.wait_for(store.flush(), 10))
        asyncio.run(store.aclose())  # nothing to close here: returns

    assert _in_child(child) == 0
    store.write(tool_result(0))  # the parent's store goes on
    asyncio.run(store.aclose())
    rows = sqlite3.connect(db).execute("SELECT call_id FROM tool_calls").fetchall()
    assert rows == [("call-0",)]


def test_a_store_the_parent_never_opened_is_the_childs(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = SQLiteStore(db)

    def child() -> None:
        async def main() -> None:
            await store.open()
            store.write(start())
            store.write(tool_result(1))
            await store.aclose()

        asyncio.run(main())

    assert _in_child(child) == 0
    rows = sqlite3.connect(db).execute("SELECT call_id FROM tool_calls").fetchall()
    assert rows == [("call-1",)]


@pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")
def test_a_segment_being_made_at_the_fork_is_not_kept_locked_by_the_child(
    tmp_path: Path,
) -> None:
    """The writer thread makes the next segment while the loop's thread forks: the child
    must not keep that segment's descriptors (they share the parent's lock, and a child
    outliving its killed parent would keep the segment from the next open). It used to:
    only segments a journal held were let go of."""
    seg = _journal_segment._Segment(
        tmp_path / ".x.af-journal-1-00.tmp", 1 << 16, 1 << 16
    )  # no journal's

    def child() -> None:
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(seg.fd)  # closed in the child by the at-fork hook

    try:
        assert _in_child(child) == 0
    finally:
        seg.close(delete=True)
