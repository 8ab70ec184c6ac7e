"""A PostgreSQL schema holding another application's tables and no agentflow schema
version is refused by ``open()`` ("not an agentflow store"), left as it was — as
SQLiteStore refuses such a database. It used to be taken over: agentflow's tables made
beside the application's, its schema version written into the application's ``meta``,
and every commit then failed on the application's ``sessions`` table."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from agentflow import StoreError
from agentflow.store import PostgresStore

from .journal_child import tool_result


def _tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return sorted(str(r[0]) for r in rows)


@pytest.mark.parametrize("meta", [True, False], ids=["its-own-meta", "no-meta"])
def test_a_schema_of_another_application_is_refused_and_left_as_it_was(
    postgres_db: str, meta: bool
) -> None:
    with psycopg.connect(postgres_db, autocommit=True) as conn:
        if meta:
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT INTO meta VALUES ('app_version', '7')")
        conn.execute("CREATE TABLE sessions (id SERIAL PRIMARY KEY, user_id INT, token TEXT)")
    before = _tables(postgres_db)

    async def main() -> None:
        store = PostgresStore(postgres_db, schema="public")
        with pytest.raises(StoreError, match=r"not an agentflow store \(schema public holds"):
            await store.open()

    asyncio.run(main())
    assert _tables(postgres_db) == before
    if meta:
        with psycopg.connect(postgres_db) as conn:
            assert conn.execute("SELECT * FROM public.meta").fetchall() == [("app_version", "7")]

    async def own_schema() -> None:  # the same database, agentflow's own schema: fine
        async with PostgresStore(postgres_db) as store:
            store.write(tool_result(0))
            await store.flush()

    asyncio.run(own_schema())


def test_a_store_in_the_public_schema_opens_again(postgres_db: str) -> None:
    async def main() -> None:
        for _ in range(2):  # made on the first open, found (with its version) on the second
            async with PostgresStore(postgres_db, schema="public") as store:
                store.write(tool_result(0))
                await store.flush()

    asyncio.run(main())
    assert "tool_calls" in _tables(postgres_db)
