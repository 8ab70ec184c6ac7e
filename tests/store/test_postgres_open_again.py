"""A PostgresStore whose first ``open()`` found the server down opens once it is up: the
next call connects again (the store used to fail for good — every later ``open()``,
``runs()`` or ``Fleet.run`` raised the first "Connection refused" with the server up,
where a new store object worked). Records written while it was down are kept, in order,
for the connection that comes."""

from __future__ import annotations

import asyncio

import pytest

from agentflow import StoreError
from agentflow._process import free_port
from agentflow.store import PostgresStore
from agentflow.store._records import RunStarted
from agentflow.testing import PostgresServer

from ..wait import GUARD_S
from .pg_proxy import Proxy


def _refused(postgres_db: str, server: PostgresServer) -> tuple[str, int]:
    """``postgres_db`` through a port nothing listens on (yet), and that port."""
    port = free_port()
    return postgres_db.replace(f":{server.port}/", f":{port}/"), port


def test_a_store_whose_first_open_found_the_server_down_opens_once_it_is_up(
    postgres_db: str, postgres_server: PostgresServer
) -> None:
    dsn, port = _refused(postgres_db, postgres_server)

    async def main() -> None:
        store = PostgresStore(dsn, connect_timeout_s=2)
        with pytest.raises(StoreError, match="refused"):
            await asyncio.wait_for(store.open(), GUARD_S)
        # Written while the server is down: kept for the connection to come.
        store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=0))
        with pytest.raises(StoreError, match="refused"):  # tried again: still down
            await asyncio.wait_for(store.runs(), GUARD_S)
        proxy = Proxy(postgres_server.port, port)  # the server is up
        try:
            await asyncio.wait_for(store.open(), GUARD_S)
            assert [r.run_id for r in await asyncio.wait_for(store.runs(), GUARD_S)] == ["r"]
            await asyncio.wait_for(store.aclose(), GUARD_S)
        finally:
            proxy.close()

    asyncio.run(main())


def test_closing_a_store_that_never_connected_leaves_no_thread(
    postgres_db: str, postgres_server: PostgresServer
) -> None:
    dsn, _ = _refused(postgres_db, postgres_server)

    async def main() -> None:
        store = PostgresStore(dsn, connect_timeout_s=2)
        with pytest.raises(StoreError, match="refused"):
            await asyncio.wait_for(store.open(), GUARD_S)
        await asyncio.wait_for(store.aclose(), GUARD_S)
        watchdog = store._watchdog._thread
        assert watchdog is not None
        await asyncio.to_thread(watchdog.join, GUARD_S)
        assert not watchdog.is_alive()
        assert store._thread is None or not store._thread.is_alive()
        with pytest.raises(StoreError, match="closed"):
            await store.open()

    asyncio.run(main())
