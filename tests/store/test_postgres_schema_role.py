"""A role that may only read and write the tables an administrator made opens the
store: open() runs no DDL when the schema, every table and the version row exist.
It used to run CREATE SCHEMA/TABLE/INDEX IF NOT EXISTS on every open, which PostgreSQL
privilege-checks before looking whether the object exists: InsufficientPrivilege."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from agentflow.store import PostgresStore

from .journal_child import tool_result


@pytest.fixture
def worker_dsn(postgres_db: str) -> Iterator[str]:
    """The tables made by the administrator; the DSN of a role granted only DML on them."""

    async def make_tables() -> None:
        async with PostgresStore(postgres_db):
            pass

    asyncio.run(make_tables())
    role, password = f"worker_{secrets.token_hex(4)}", secrets.token_hex(8)
    with psycopg.connect(postgres_db, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        admin.execute(f"GRANT USAGE ON SCHEMA agentflow TO {role}")
        admin.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA agentflow TO {role}"
        )
        dbname = admin.info.dbname
        admin.execute(f"REVOKE CREATE ON DATABASE {dbname} FROM PUBLIC")
    try:
        yield make_conninfo(postgres_db, user=role, password=password)
    finally:
        with psycopg.connect(postgres_db, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_a_role_with_only_dml_on_prepared_tables_opens_the_store(worker_dsn: str) -> None:
    with psycopg.connect(worker_dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE SCHEMA IF NOT EXISTS agentflow")  # it may not create

    async def main() -> list[str]:
        async with PostgresStore(worker_dsn) as store:
            store.write(tool_result(0))
            await store.flush()
            return await store.conflicts("r")

    assert asyncio.run(main()) == []
    with psycopg.connect(worker_dsn) as conn:
        rows = conn.execute("SELECT call_id FROM agentflow.tool_calls").fetchall()
    assert rows == [("call-0",)]
