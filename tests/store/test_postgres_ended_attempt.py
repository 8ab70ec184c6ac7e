"""``sessions.ended_attempt`` on a PostgreSQL store made before it: a connect adds the
column (the first that gets its lock in time), and a role that may not alter the tables an
administrator made opens the store and records as before, without it
(``docs/store-postgres.md``, *Requirements*)."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest

from agentflow import Fleet
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore

from ..wait import GUARD_S
from .fleets import agents, driver
from .test_postgres_schema_role import worker_dsn

__all__ = ["worker_dsn"]  # (the fixture, shared)


def _drop_the_column(admin_dsn: str) -> None:
    """Make the store one of before ``ended_attempt``."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("ALTER TABLE agentflow.sessions DROP COLUMN ended_attempt")


def _has_the_column(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'agentflow'"
            " AND table_name = 'sessions' AND column_name = 'ended_attempt'"
        ).fetchone()
    return row is not None and row[0] == 1


def _run_and_load(dsn: str, run_id: str) -> list[tuple[str, int | None]]:
    """A run of three sessions on the simulator: each one's status and ``ended_attempt``."""

    async def main() -> list[tuple[str, int | None]]:
        store, transport = PostgresStore(dsn), SimTransport(driver())
        try:
            team = agents()
            sessions = [team[i].session(f"task {i}", session_id=f"s{i}") for i in range(3)]
            await Fleet(transport, clock=loop_clock, store=store).run(sessions, run_id=run_id)
            run = await store.load(run_id)
            return [(s.status, s.ended_attempt) for s in run.sessions]
        finally:
            await store.aclose()
            await transport.aclose()

    return run_virtual(main())


def test_a_store_made_before_the_column_gets_it_as_it_opens(postgres_db: str) -> None:
    assert _run_and_load(postgres_db, "r1") == [("completed", 0)] * 3  # (made with it)
    _drop_the_column(postgres_db)
    assert not _has_the_column(postgres_db)
    assert _run_and_load(postgres_db, "r2") == [("completed", 0)] * 3
    assert _has_the_column(postgres_db)


def test_a_role_that_may_not_add_it_records_without_it(postgres_db: str, worker_dsn: str) -> None:
    _drop_the_column(postgres_db)
    assert _run_and_load(worker_dsn, "r") == [("completed", None)] * 3
    assert not _has_the_column(postgres_db)


def test_a_held_lock_on_sessions_leaves_the_column_to_a_later_connect(
    postgres_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The ALTER waited behind a transaction that had read ``sessions`` (another worker's,
    a psql session's) up to the statement timeout, and every other statement on
    ``sessions`` queued behind it meanwhile; it gives up at its lock timeout instead."""
    _run_and_load(postgres_db, "r1")
    _drop_the_column(postgres_db)

    async def open_and_close() -> None:
        store = PostgresStore(postgres_db, statement_timeout_s=GUARD_S)
        try:
            await asyncio.wait_for(store.open(), GUARD_S)
        finally:
            await store.aclose()

    with psycopg.connect(postgres_db) as holder:  # idle in a transaction that read sessions
        holder.execute("SELECT count(*) FROM agentflow.sessions").fetchone()
        with caplog.at_level(logging.WARNING, logger="agentflow.store"):
            asyncio.run(open_and_close())
        assert "store.column_not_added" in caplog.text
        assert "lock timeout" in caplog.text  # (not the statement timeout)
        assert not _has_the_column(postgres_db)
    assert _run_and_load(postgres_db, "r2") == [("completed", 0)] * 3  # the next connect
    assert _has_the_column(postgres_db)


def test_workers_wait_for_their_turn_at_the_column_at_most_the_lock_timeout(
    postgres_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Workers opening at once take turns at the ``ALTER`` (an advisory lock); they waited
    for their turn without a bound, then each up to the lock timeout for the ``ALTER``'s
    lock, one after another, and every statement on ``sessions`` queued meanwhile. Here
    the turn is held by this test: the open gives up at the lock timeout (it ran until
    the statement timeout)."""
    _run_and_load(postgres_db, "r1")
    _drop_the_column(postgres_db)

    async def open_and_close() -> None:
        store = PostgresStore(postgres_db, statement_timeout_s=5.0)
        try:
            await asyncio.wait_for(store.open(), GUARD_S)
        finally:
            await store.aclose()

    with psycopg.connect(postgres_db) as turn:  # another worker's turn, taken
        turn.execute("SELECT pg_advisory_xact_lock(hashtext('agentflow.store.schema'))")
        with caplog.at_level(logging.WARNING, logger="agentflow.store"):
            asyncio.run(open_and_close())
        assert "store.column_not_added" in caplog.text
        assert "lock timeout" in caplog.text  # (not the statement timeout)
    assert _run_and_load(postgres_db, "r2") == [("completed", 0)] * 3  # the next connect
    assert _has_the_column(postgres_db)
