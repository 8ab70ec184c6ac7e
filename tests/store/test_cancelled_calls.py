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

from agentflow.store import PostgresStore, SQLiteStore

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
