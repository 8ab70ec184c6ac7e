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

from ..wait import GUARD_S

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
