"""Opening a journaled store makes the loop's first segment on the writer thread, before
the serving loop (and its failure handling) starts: whatever goes wrong there must not
leave ``open()`` waiting on a thread that is gone."""

from __future__ import annotations

import asyncio
import glob
import sqlite3
from pathlib import Path

import pytest

from agentflow.store import SQLiteStore, _journal
from agentflow.store._journaled import JournaledWriter

from ..wait import GUARD_S
from .journal_child import tool_result

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def test_a_failure_making_the_first_segment_does_not_hang_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (not an ``OSError``) while the writer makes the first segment at open is
    logged; ``open()`` returns, the loop makes its segment itself, and records go
    through the journal to SQLite as usual."""
    real = JournaledWriter._ready_journal
    calls = [0]

    def failing_once(self: JournaledWriter) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a bug while making the spare")
        real(self)

    monkeypatch.setattr(JournaledWriter, "_ready_journal", failing_once)
    db = tmp_path / "spare.db"

    async def main() -> int:
        store = SQLiteStore(db, batch_interval_s=10)
        await asyncio.wait_for(store.open(), GUARD_S)
        for i in range(3):
            store.write(tool_result(i))
        made = len(glob.glob(glob.escape(str(db)) + ".af-journal-*"))
        await asyncio.wait_for(store.aclose(), GUARD_S)
        return made

    assert asyncio.run(main()) == 1  # the loop's own segment
    assert calls[0] >= 1
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0] == 3
    finally:
        conn.close()
