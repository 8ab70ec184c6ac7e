"""PostgresStore outlives a lost connection (the server restarted, the network dropped
it, an administrator ended it — here ``pg_terminate_backend``): the batch that met the
loss is committed again on a new connection, reads go on, nothing is lost
and no error is left. It used to fail every later commit and read until the store
closed."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from agentflow import StoreError
from agentflow.store import PostgresStore, _postgres

from .journal_child import tool_result


def _end_the_stores_connections(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'agentflow' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _calls(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT call_id FROM tool_calls ORDER BY turn").fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("next_use", ["write", "read"])
def test_a_lost_connection_is_replaced_and_nothing_is_lost(postgres_db: str, next_use: str) -> None:
    async def main() -> tuple[int, list[str]]:
        store = PostgresStore(postgres_db)
        await store.open()
        for i in range(3):
            store.write(tool_result(i))
        await store.flush()
        ended = await asyncio.to_thread(_end_the_stores_connections, postgres_db)
        if next_use == "read":  # a read meets the loss first: it fails, says so
            with pytest.raises(Exception, match=r"terminat|closed|connection"):
                await store.runs()
        for i in range(3, 6):  # a batch meets the loss (or the new connection)
            store.write(tool_result(i))
        await store.flush()  # committed on a new connection: no error left
        conflicts = await store.conflicts("r")  # reads go on; nothing was written twice
        await store.aclose()
        return ended, conflicts

    ended, conflicts = asyncio.run(main())
    assert ended == 1
    assert conflicts == []
    assert _calls(postgres_db) == [f"call-{i}" for i in range(6)]


def test_while_no_connection_can_be_made_the_batch_waits_for_one(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server is gone for a while (the store's reconnections fail): flushes say so,
    # and the records wait in memory; once a connection is made again, they are
    # committed first, in order, and the error is gone.
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 0.0)

    async def main() -> str:
        store = PostgresStore(postgres_db)
        await store.open()
        store.write(tool_result(0))
        await store.flush()

        def down() -> psycopg.Connection[tuple[object, ...]]:
            raise psycopg.OperationalError("the server is down")

        store._connect = down  # type: ignore[method-assign]
        await asyncio.to_thread(_end_the_stores_connections, postgres_db)
        for i in range(1, 4):
            store.write(tool_result(i))
        with pytest.raises(StoreError, match="a write failed") as info:
            await store.flush()
        del store._connect  # the server is back
        store.write(tool_result(4))
        await store.flush()  # the waiting batch first, then this one: no error left
        await store.aclose()
        return str(info.value)

    message = asyncio.run(main())
    assert "terminat" in message or "closed" in message or "connection" in message
    assert _calls(postgres_db) == [f"call-{i}" for i in range(5)]
