"""A server that stops answering — a network partition that drops packets silently —
does not hang PostgresStore: the server's statement_timeout cannot fire where it cannot
be reached, so a watchdog cuts a connection whose call or commit has waited past
``statement_timeout_s`` + a margin, and the store's reconnect-and-hold path takes over:
flush, reads and aclose end with a StoreError (the records held, and reported), and once
the network is back the held records are committed. They used to wait forever."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest

from agentflow import StoreError
from agentflow.store import PostgresStore, _pg_conn, _postgres
from agentflow.testing import PostgresServer

from .journal_child import tool_result
from .pg_proxy import Proxy

GUARD_S = 60.0  # a hang guard only: without the watchdog, these calls never return


@pytest.fixture
def proxy(postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    monkeypatch.setattr(_pg_conn, "WATCHDOG_MARGIN_S", 1.0)
    p = Proxy(postgres_server.port)
    yield p
    p.close()


def _calls(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT call_id FROM tool_calls ORDER BY turn")]


async def _cut_after_one(dsn: str, proxy: Proxy) -> PostgresStore:
    """A store whose first record is committed; then the network is cut, a second
    record written, and its flush ends in a StoreError (not a hang)."""
    store = PostgresStore(proxy.dsn(dsn), statement_timeout_s=1, connect_timeout_s=2)
    await asyncio.wait_for(store.open(), GUARD_S)
    store.write(tool_result(0))
    await asyncio.wait_for(store.flush(), GUARD_S)
    proxy.cut()
    store.write(tool_result(1))
    with pytest.raises(StoreError, match="a write failed"):
        await asyncio.wait_for(store.flush(), GUARD_S)
    return store


def test_a_silent_partition_ends_in_store_errors_not_a_hang(postgres_db: str, proxy: Proxy) -> None:
    async def main() -> PostgresStore:
        store = await _cut_after_one(postgres_db, proxy)
        with pytest.raises(StoreError):
            await asyncio.wait_for(store.runs(), GUARD_S)
        with pytest.raises(StoreError, match="a write failed"):  # the held record, reported
            await asyncio.wait_for(store.aclose(), GUARD_S)
        return store

    store = asyncio.run(main())
    assert store._watchdog.cuts >= 1
    assert _calls(postgres_db) == ["call-0"]


def test_the_records_held_through_a_partition_are_committed_once_it_heals(
    postgres_db: str, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 0.0)  # the next flush reconnects

    async def main() -> None:
        store = await _cut_after_one(postgres_db, proxy)
        proxy.heal()
        store.write(tool_result(2))
        await asyncio.wait_for(store.flush(), GUARD_S)  # on a new connection, in order
        assert await store.conflicts("r") == []
        await asyncio.wait_for(store.aclose(), GUARD_S)

    asyncio.run(main())
    assert _calls(postgres_db) == ["call-0", "call-1", "call-2"]


def test_the_connection_has_keepalives_unless_the_dsn_sets_its_own(postgres_db: str) -> None:
    async def main(dsn: str) -> dict[str, str]:
        store = PostgresStore(dsn, statement_timeout_s=8)
        await asyncio.wait_for(store.open(), GUARD_S)
        try:
            return await store._call(lambda c: c.info.get_parameters())
        finally:
            await store.aclose()

    got = asyncio.run(main(postgres_db))
    assert got["keepalives"] == "1"
    assert got["keepalives_idle"] == "2"
    assert got["tcp_user_timeout"] == "8000"
    got = asyncio.run(main(postgres_db + "?keepalives_idle=7"))
    assert got["keepalives_idle"] == "7"
