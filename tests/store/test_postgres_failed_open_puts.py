"""A record written outside an event loop, and a batch gathered on another loop, while a
failed first connection's thread puts the queued records back
(``PostgresStore._open_failed``) stay behind those older records: both were put on the
queue outside the lock that drain holds, and could land between the drain and the re-put
— the next connection then committed them first, out of order."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentflow import StoreError
from agentflow._process import free_port
from agentflow.store import PostgresStore
from agentflow.store._records import RunStarted

from ..wait import GUARD_S

pytest.importorskip("psycopg")


def _started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, attempt=0, wall_ns=1, clock_ns=1, sessions=0)


class _PutDuringDrain(queue.SimpleQueue[Any]):
    """Once armed, the next put (the writing thread's) waits until ``_open_failed`` has
    drained the queue — or until it gives up, should that drain wait for it (the lock is
    held) — and the drain, having emptied the queue, gives that put a moment to land."""

    def __init__(self) -> None:
        self.armed = False
        self.at_put = threading.Event()
        self.drained = threading.Event()
        self.writer: threading.Thread | None = None

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if self.armed:
            self.armed = False
            self.at_put.set()
            self.drained.wait(1.0)  # (gives up while the drain waits for this thread)
        super().put(item, block, timeout)

    def get_nowait(self) -> Any:
        try:
            return super().get_nowait()
        except queue.Empty:
            if self.at_put.is_set() and not self.drained.is_set():
                self.drained.set()
                assert self.writer is not None
                self.writer.join(1.0)
            raise


def _order(q: queue.SimpleQueue[Any]) -> list[str]:
    order: list[str] = []
    while not q.empty():
        item = q.get()
        order += [r.run_id for r in item] if isinstance(item, list) else [item.run_id]
    return order


def _enqueue_on_a_loop(store: PostgresStore, run_id: str) -> None:
    async def write() -> None:
        store._enqueue(_started(run_id))

    asyncio.run(write())


@pytest.mark.parametrize("where", ["outside a loop", "on another loop"])
def test_a_put_while_a_failed_open_puts_records_back_goes_after_them(where: str) -> None:
    store = PostgresStore(f"host=127.0.0.1 port={free_port()} dbname=x", batch_interval_s=10)
    q = store._queue = _PutDuringDrain()
    store._enqueue(_started("older"))  # (no loop: queued for the writer thread)
    write: Callable[[], None]
    if where == "outside a loop":
        write = lambda: store._enqueue(_started("newer"))  # noqa: E731
    else:
        _enqueue_on_a_loop(store, "newer")  # a batch gathered on a loop (never handed over)
        write = lambda: _enqueue_on_a_loop(store, "newest")  # noqa: E731
    q.armed = True
    q.writer = threading.Thread(target=write)
    q.writer.start()
    assert q.at_put.wait(GUARD_S)
    failed: concurrent.futures.Future[None] = concurrent.futures.Future()
    store._open_failed(StoreError("down"), failed)
    q.writer.join(GUARD_S)
    assert _order(q)[:2] == ["older", "newer"]
    store._watchdog.stop()
