"""A caller that stops waiting for the writer thread (its task cancelled) must not end
that thread: it used to answer the cancelled future, which raised inside the thread and
killed it, and every later flush then waited forever (the PostgreSQL crash test hung
that way now and then, in the uninterrupted run)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from agentflow.embedded import run_virtual
from agentflow.store import PostgresStore, RunStarted, SQLiteStore
from agentflow.store._closing import wait_through_cancel

from ..wait import GUARD_S


async def _cancel_while_the_writer_is_busy(store: Any) -> list[str]:
    """Hold the writer in a call; queue a flush and a load and cancel both; let the
    writer go: the store must still answer (flush, load) and close."""
    await store.open()
    busy, go = threading.Event(), threading.Event()

    def hold(conn: Any) -> str:
        busy.set()
        go.wait(GUARD_S)
        return "held"

    held = asyncio.ensure_future(store._call(hold))
    await asyncio.to_thread(busy.wait, GUARD_S)
    waiting = [asyncio.ensure_future(store.flush()), asyncio.ensure_future(store.runs())]
    await asyncio.sleep(0)  # both are queued behind the held call
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    go.set()
    out = [await asyncio.wait_for(held, GUARD_S)]
    await asyncio.wait_for(store.flush(), GUARD_S)  # the writer is alive
    out.append(str(await asyncio.wait_for(store.runs(), GUARD_S)))
    await asyncio.wait_for(store.aclose(), GUARD_S)
    return out


def test_sqlite_survives_cancelled_callers(tmp_path: Path) -> None:
    out = asyncio.run(_cancel_while_the_writer_is_busy(SQLiteStore(tmp_path / "s.db")))
    assert out == ["held", "[]"]


def test_postgres_survives_cancelled_callers(postgres_db: str) -> None:
    out = asyncio.run(_cancel_while_the_writer_is_busy(PostgresStore(postgres_db)))
    assert out == ["held", "[]"]


@pytest.mark.parametrize("cancel", [True, False])
def test_a_cancelled_close_still_closes(tmp_path: Path, cancel: bool) -> None:
    """The closing call runs even when aclose's caller stopped waiting."""

    async def main() -> bool:
        store = SQLiteStore(tmp_path / "c.db")
        await store.open()
        await store.flush()
        closing = asyncio.ensure_future(store.aclose())
        await asyncio.sleep(0)
        if cancel:
            closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)
        thread = store._thread
        assert thread is not None
        await asyncio.to_thread(thread.join, GUARD_S)
        return thread.is_alive()

    assert asyncio.run(main()) is False


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def _close_cancelled_while_held(store: Any, record: RunStarted) -> None:
    """Hold ``store``'s writer in a call, write ``record``, start ``aclose()`` (queued
    behind the held call) and cancel it twice: it must go on waiting; once the writer
    is let go, it raises the cancellation."""
    busy, go = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        busy.set()
        go.wait(GUARD_S)

    held = asyncio.ensure_future(store._call(hold))
    await asyncio.to_thread(busy.wait, GUARD_S)
    store.write(record)
    closing = asyncio.ensure_future(store.aclose())  # queued behind the held call
    for _ in range(2):
        await asyncio.sleep(0)
        closing.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not closing.done()  # still waiting for the writer, which is held
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await closing
    await held


def test_a_close_cancelled_at_its_await_waits_for_the_writer(tmp_path: Path) -> None:
    """A SIGTERM cancels a command's main task, maybe while it awaits ``aclose()``: the
    cancellation used to return at once, the writer thread still closing the database
    in the background (racing the process's exit: the ``-wal`` and ``-shm`` files left
    behind) and the run locks given back while it wrote. Now the close goes on — through
    a second cancellation too — and the cancellation is raised once the store is closed."""
    db = tmp_path / "c.db"

    async def main() -> None:
        store = SQLiteStore(db)
        await store.open()
        store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
        assert await store.start_attempt("r", 2, 0) == 1  # the run's lock is held
        second = RunStarted(run_id="r2", attempt=0, wall_ns=1, clock_ns=0, sessions=0)
        await _close_cancelled_while_held(store, second)
        thread = store._thread
        assert thread is not None and not thread.is_alive()
        assert _names(tmp_path) == ["c.db"]  # no -wal, -shm, journal segment
        async with SQLiteStore(db) as other:  # the run's lock was given back
            assert await other.start_attempt("r", 3, 0) == 2
            assert {r.run_id for r in await other.runs()} == {"r", "r2"}

    asyncio.run(main())


def test_a_postgres_close_cancelled_at_its_await_commits_first(postgres_db: str) -> None:
    """The same for PostgreSQL: a cancellation of ``aclose()`` while the writer is busy
    used to return at once, the records queued before it committed (or not) by a
    thread racing the process's exit; now they are committed when it raises."""

    async def main() -> list[str]:
        store = PostgresStore(postgres_db)
        await store.open()
        record = RunStarted(run_id="pg-r", attempt=0, wall_ns=1, clock_ns=0, sessions=0)
        await _close_cancelled_while_held(store, record)
        async with PostgresStore(postgres_db) as other:
            return [r.run_id for r in await other.runs()]

    assert "pg-r" in asyncio.run(main())


def test_the_wait_through_a_cancellation_is_bounded() -> None:
    """A close that never ends is waited for ``timeout_s`` (virtual time here: the
    loop's clock), cancelled or not — then the cancellation, or a TimeoutError."""

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        never: asyncio.Future[None] = loop.create_future()
        start = loop.time()
        with pytest.raises(TimeoutError):
            await wait_through_cancel(never, 30.0)
        waited = loop.time() - start
        task = asyncio.ensure_future(wait_through_cancel(never, 30.0))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return waited, loop.time() - start - waited

    assert run_virtual(main()) == (30.0, 30.0)
