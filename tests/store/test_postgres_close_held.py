"""A flush or a close of a PostgresStore whose connection was lost, with records held,
tries a new connection at once — not only once a second after the last try — and a close
that still cannot commit them says how many were lost. (A failed commit and a failed
reconnection — a server restarting, or in crash recovery — and a close within the next
second dropped the held records without a try, the server back, raising only "the
connection is closed".) The reconnection delay is made an hour here, so each flush and
close below falls inside it whatever the machine's speed."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from agentflow import StoreError
from agentflow.store import PostgresStore, _postgres

from ..wait import GUARD_S
from .journal_child import tool_result
from .test_postgres_reconnect import _calls, _end_the_stores_connections


def _down() -> psycopg.Connection[tuple[object, ...]]:
    raise psycopg.OperationalError("the server is down")


async def _held(dsn: str) -> PostgresStore:
    """A store whose connection was lost with call-1..3 held: its one try at a new
    connection failed (the next waits an hour)."""
    store = PostgresStore(dsn)
    await store.open()
    store.write(tool_result(0))
    await store.flush()
    store._connect = _down  # type: ignore[method-assign]
    await asyncio.to_thread(_end_the_stores_connections, dsn)
    for i in range(1, 4):
        store.write(tool_result(i))
    with pytest.raises(StoreError, match="a write failed"):
        await asyncio.wait_for(store.flush(), GUARD_S)
    return store


@pytest.fixture(autouse=True)
def _an_hour_between_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 3600.0)


@pytest.mark.parametrize("then", ["close", "flush"])
def test_the_server_back_a_close_or_flush_commits_the_held_records(
    postgres_db: str, then: str
) -> None:
    async def main() -> None:
        store = await _held(postgres_db)
        del store._connect  # the server is back (a restart took under a second)
        if then == "flush":
            await asyncio.wait_for(store.flush(), GUARD_S)
        await asyncio.wait_for(store.aclose(), GUARD_S)

    asyncio.run(main())
    assert _calls(postgres_db) == [f"call-{i}" for i in range(4)]


def test_a_close_that_cannot_reconnect_says_how_many_records_were_lost(postgres_db: str) -> None:
    tries = 0

    async def main() -> None:
        store = await _held(postgres_db)

        def still_down() -> psycopg.Connection[tuple[object, ...]]:
            nonlocal tries
            tries += 1
            return _down()

        store._connect = still_down  # type: ignore[method-assign]
        with pytest.raises(StoreError, match="3 records were not written") as info:
            await asyncio.wait_for(store.aclose(), GUARD_S)
        assert "the server is down" in str(info.value)  # (why the last try failed)
        await asyncio.wait_for(store.aclose(), GUARD_S)  # (closed: nothing more to say)

    asyncio.run(main())
    assert tries == 1  # one more try, not a loop
    assert _calls(postgres_db) == ["call-0"]
