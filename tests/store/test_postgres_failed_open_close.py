"""Closing a PostgresStore whose first connection failed, with records written since:
it connects once more to commit them, and — the server still down — says how many were
not written. (``aclose`` returned without a word, the records dropped: a store whose
thread had ended after a failed ``open()`` had nothing to stop.)"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import StoreError
from agentflow._process import free_port
from agentflow.store import PostgresStore
from agentflow.store._records import RunStarted

from ..wait import GUARD_S, eventually

pytest.importorskip("psycopg")


def _started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, attempt=0, wall_ns=1, clock_ns=1, sessions=0)


def test_records_written_after_a_failed_open_are_not_dropped_silently() -> None:
    async def main() -> None:
        store = PostgresStore(f"host=127.0.0.1 port={free_port()} dbname=x", connect_timeout_s=2)
        with pytest.raises(StoreError, match="refused"):
            await asyncio.wait_for(store.open(), GUARD_S)
        store.write(_started("r1"))
        store.write(_started("r2"))
        with pytest.raises(StoreError, match="2 records were not written"):
            await asyncio.wait_for(store.aclose(), GUARD_S)
        await asyncio.wait_for(store.aclose(), GUARD_S)  # (closed: nothing more to say)
        with pytest.raises(StoreError):
            store.write(_started("r3"))

    asyncio.run(main())


def test_a_failed_open_leaves_no_watchdog_thread() -> None:
    # (each failed open left its store's watchdog thread running, for good: 20 failed
    # `async with PostgresStore(...)` left 20 threads)
    async def main() -> None:
        dsn = f"host=127.0.0.1 port={free_port()} dbname=x"
        watchdogs = []
        again = PostgresStore(dsn, connect_timeout_s=2)
        for _ in range(3):
            for store in (PostgresStore(dsn, connect_timeout_s=2), again):
                with pytest.raises(StoreError, match="refused"):
                    async with store:
                        pass
                watchdogs.append(store._watchdog._thread)
        assert None not in watchdogs
        alive = [t for t in {*watchdogs} if t is not None]
        await eventually(lambda: not any(t.is_alive() for t in alive), "watchdogs ended")

    asyncio.run(main())
