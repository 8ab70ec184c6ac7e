"""Review tests of the SQLite store's journal (``store/_journal.py``): what a killed
writer's journal gives the next open must be what the store would have committed."""

from __future__ import annotations

import asyncio
import datetime  # noqa: F401 (the parameters eval it)
import itertools
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.store import RunStarted, SQLiteStore, _journal
from agentflow.store._codec import encode

from ..wait import GUARD_S
from .journal_child import tool_result
from .journal_review_child import session, start
from .test_journal import _open_close, _segments

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def _child(*args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.journal_review_child", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _killed(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == -9, (proc.returncode, out, err[-3000:])
    return out


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "value",
    [
        "{1: 'x'}",  # a key that is not a str: JSON makes it "1"
        "{'at': datetime.datetime(2026, 1, 1, tzinfo="
        "datetime.timezone(datetime.timedelta(hours=2)))}",
    ],
)
def test_a_killed_sessions_metadata_is_stored_as_without_a_kill(tmp_path: Path, value: str) -> None:
    """Session metadata the store accepts (non-str keys, a datetime in another zone)
    comes out of a killed writer's journal as the store commits it: the next open
    neither fails on it nor stores it differently."""
    db = tmp_path / "meta.db"
    _killed(_child("metadata", str(db), value))
    assert len(_segments(db)) == 1
    asyncio.run(_open_close(db))
    assert _rows(db, "SELECT metadata FROM sessions") == [(encode(eval(value)),)]
    assert _segments(db) == []


class _ReprFails:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_metadata_whose_repr_fails_is_the_commits_error_not_the_writers(
    tmp_path: Path,
) -> None:
    """The journal encodes a session's metadata as its JSON as it is written: an object
    whose repr raises must not make ``write`` raise (on the loop, in the recorder) —
    the commit fails and the next flush says so, as without the journal."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "repr.db", batch_interval_s=10)
        await store.open()
        store.write(start())
        store.write(session({"x": _ReprFails()}))
        with pytest.raises(StoreError, match="no repr"):
            await store.flush()
        await store.aclose()  # the flush reported it: once

    asyncio.run(main())


def test_records_committed_after_a_failed_commit_are_not_ingested_again(
    tmp_path: Path,
) -> None:
    """A commit fails (another connection holds the write lock past busy_timeout): that
    flush reports it; the next commit writes the failed batch first, so once it succeeds
    nothing is lost and no error remains; the next open commits no record again (no
    conflict row)."""
    db = tmp_path / "busy.db"

    async def main() -> None:
        store = SQLiteStore(db, batch_interval_s=10, busy_timeout_s=0.05)
        await store.open()
        store.write(start())
        await store.flush()
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        store.write(tool_result(0))
        with pytest.raises(StoreError, match="locked"):
            await store.flush()
        other.execute("COMMIT")
        other.close()
        store.write(tool_result(1))
        await store.flush()  # the failed batch went in first: nothing lost, no error left
        await store.aclose()

    asyncio.run(main())
    asyncio.run(_open_close(db))
    assert _rows(db, "SELECT call_id FROM tool_calls ORDER BY turn") == [
        ("call-0",),
        ("call-1",),
    ]
    assert _rows(db, "SELECT kind, key FROM conflicts") == []
    assert _segments(db) == []


class _Unprintable:
    def __repr__(self) -> str:
        raise ValueError("no repr")


def test_a_record_that_fails_on_its_own_is_left_out_and_nothing_else(tmp_path: Path) -> None:
    """A record SQLite's encoding refuses is left out of its commit, and the next flush
    says so: the rest of its batch and later records are committed, and the next open
    commits none of them again (it used to fail the whole batch: up to 5 s of every
    session's turns)."""
    db = tmp_path / "bad.db"

    async def main() -> list[str]:
        store = SQLiteStore(db, batch_interval_s=10)
        await store.open()
        store.write(start())
        await store.flush()
        bad = RunStarted(
            run_id="bad", attempt=0, wall_ns=1, clock_ns=0, sessions=0,
            config={"x": _Unprintable()},
        )  # fmt: skip
        store.write(bad)
        store.write(tool_result(0))
        with pytest.raises(
            StoreError, match=r"1 record\(s\) left out.*RunStarted of run bad.*no repr"
        ):
            await store.flush()
        store.write(tool_result(1))
        runs = [r.run_id for r in await store.runs()]
        await store.aclose()  # the flush reported it: once
        return runs

    assert asyncio.run(main()) == ["r"]
    calls = [("call-0",), ("call-1",)]
    assert _rows(db, "SELECT call_id FROM tool_calls ORDER BY turn") == calls
    asyncio.run(_open_close(db))
    assert _rows(db, "SELECT call_id FROM tool_calls ORDER BY turn") == calls
    assert _rows(db, "SELECT kind, key FROM conflicts") == []
    assert _segments(db) == []


def test_a_forked_child_does_not_keep_a_killed_writers_journal_locked(
    tmp_path: Path,
) -> None:
    """The writer forks (a multiprocessing worker, say) and is killed while the child
    lives on: the next open still commits the killed writer's records."""
    db = tmp_path / "fork.db"
    proc = _child("fork", str(db), stdin=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        forked = int(proc.stdout.readline())
        proc.wait(timeout=GUARD_S)
        assert proc.returncode == -9
        os.kill(forked, 0)  # the forked child lives (it waits for its stdin to close)
        asyncio.run(_open_close(db))
        assert len(_rows(db, "SELECT call_id FROM tool_calls")) == 3
        assert _segments(db) == []
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the forked child reads EOF and exits
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read()  # EOF: the forked child (which shares the pipe) is gone too
        proc.stdout.close()
        proc.stderr.close()
        proc.wait(timeout=GUARD_S)


def test_a_forked_child_writes_nothing_into_its_parents_journal(tmp_path: Path) -> None:
    """The segments are shared mappings: a forked child that records into the store it
    inherited must not copy its records into the parent's journal (the parent's later
    records overwrite some of them, and the rest would be committed by the next open as
    the parent's)."""
    db = tmp_path / "forkwrite.db"
    _killed(_child("forkwrite", str(db)))
    asyncio.run(_open_close(db))
    calls = _rows(db, "SELECT call_id FROM tool_calls ORDER BY turn")
    assert calls == [(f"call-{i}",) for i in range(5)]


def test_records_are_committed_in_the_order_they_were_written(tmp_path: Path) -> None:
    """The writer's idle wait runs out while the loop hands over a full batch and goes
    on writing: the thread must not take the loop's newer records (and their journal
    mark) before the batch handed over. Tool results are inserted in the order they were
    written (their rowids) — a later one first is also a journal marker moved back."""
    db = tmp_path / "order.db"
    pick = random.Random(0)

    async def main() -> None:
        store = SQLiteStore(db, batch_interval_s=0.001, max_batch=3)
        await store.open()
        store.write(start())
        i = 0
        while i < 20_000:
            for _ in range(pick.randint(1, 5)):
                store.write(tool_result(i))
                i += 1
            if pick.random() < 0.3:
                await asyncio.sleep(0.0005)
        await store.aclose()

    asyncio.run(main())
    turns = [int(str(t)) for (t,) in _rows(db, "SELECT turn FROM tool_calls ORDER BY rowid")]
    assert len(turns) >= 20_000
    assert [(a, b) for a, b in itertools.pairwise(turns) if b < a] == []
