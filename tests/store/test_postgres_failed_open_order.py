"""Records written while a failed first connection's thread puts back what was queued
(``PostgresStore._open_failed``: the calls failed, the records kept for the next thread)
stay behind the older ones: a batch the event loop handed over meanwhile landed ahead of
them, and the next connection committed a session's records out of order."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from typing import Any

import pytest

from agentflow import StoreError
from agentflow._process import free_port
from agentflow.store import PostgresStore
from agentflow.store._records import RunStarted
from tests.wait import GUARD_S

pytest.importorskip("psycopg")


def _started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, attempt=0, wall_ns=1, clock_ns=1, sessions=0)


class _HandOverWhenDrained(queue.SimpleQueue[Any]):
    """A queue that, once drained by ``_open_failed``, has the loop's batch handed over
    from another thread — given a moment to land before the drained items are put back."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.fired = False
        self.other: threading.Thread | None = None

    def get_nowait(self) -> Any:
        try:
            return super().get_nowait()
        except queue.Empty:
            if not self.fired:
                self.fired = True
                other = self.other = threading.Thread(target=self.store._hand_over)
                other.start()
                other.join(0.5)  # (it waits for the drain to end: the lock is held)
            raise


async def test_a_batch_handed_over_while_a_failed_open_puts_records_back_goes_after_them() -> None:
    store = PostgresStore(f"host=127.0.0.1 port={free_port()} dbname=x", batch_interval_s=10)
    q = store._queue = _HandOverWhenDrained(store)
    store._enqueue(_started("older"))
    store._hand_over()  # queued for the writer thread
    store._enqueue(_started("newer"))  # the loop's batch, not handed over yet
    failed: concurrent.futures.Future[None] = concurrent.futures.Future()
    await asyncio.to_thread(store._open_failed, StoreError("down"), failed)
    assert q.fired and q.other is not None
    # Its hand-over waited for the lock the drain held: it lands now, once the drain has
    # ended (read before it has, on a busy machine, the queue lacked it).
    await asyncio.to_thread(q.other.join, GUARD_S)
    assert not q.other.is_alive()
    order = []
    while not q.empty():
        order += [r.run_id for r in q.get()]
    assert order == ["older", "newer"]
