"""A store opened through a symbolic link keeps its journal's segments and its run locks
beside the file the link names, where SQLite keeps its WAL: a process that opens the
store by its real name ingests what a killed writer journaled through the link, and
refuses to write a run that a store opened through the link is writing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.store import LeaseOwner, RunStarted, SQLiteStore, _journal

from .fleets import contents
from .test_journal import _kill_child, _open_close, _segments

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """(a link in one directory, the database file it names in another)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "links").mkdir()
    real, link = tmp_path / "data" / "store.db", tmp_path / "links" / "link.db"
    link.symlink_to(real)
    return link, real


def test_a_killed_writers_journal_through_a_link_is_ingested_by_the_real_name(
    tmp_path: Path,
) -> None:
    link, real = _linked(tmp_path)
    _kill_child("fleet", str(link), "7")  # kills itself at its 7th turn end
    assert len(_segments(real)) == 1
    assert _segments(link) == []
    asyncio.run(_open_close(real))
    assert len(contents(real, "run-1")["turns"]) == 7
    assert _segments(real) == []


def test_a_run_written_through_a_link_is_refused_by_the_real_name(tmp_path: Path) -> None:
    link, real = _linked(tmp_path)

    async def main() -> None:
        first, second = SQLiteStore(link), SQLiteStore(real)
        try:
            await first.open()
            first.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
            await first.claim("r", [], LeaseOwner(), 60)
            with pytest.raises(StoreError, match="another live process"):
                await second.start_attempt("r", 2, 0)
        finally:
            await first.aclose()
            await second.aclose()

    asyncio.run(main())
