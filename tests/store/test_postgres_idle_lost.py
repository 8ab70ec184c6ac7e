"""An idle PostgresStore whose connection was lost (an administrator ended it; a server
restart or an idle-session timeout does the same) answers its next read or lease call on
a new connection: the loss is only found by that call's statement, which failed — the
next ``Fleet.run`` raised at once, with the server up. A call that is not idempotent
(``start_attempt``) is not tried again: it says the connection was lost."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from agentflow import Fleet, RunNotFound, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import LeaseOwner, PostgresStore

from ..wait import GUARD_S
from .fleets import agents, driver


def _end_the_stores_connection(dsn: str) -> None:
    """End every agentflow connection to the test's database, and wait until each is
    gone (``pg_terminate_backend``'s timeout)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE application_name = 'agentflow' AND datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    assert rows == [(True,)]


def test_reads_and_lease_calls_ride_out_an_idle_connections_loss(postgres_db: str) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db)
        await store.open()
        owner = LeaseOwner()
        for call in (
            lambda: store.runs(),
            lambda: store.conflicts("r"),
            lambda: store.claim("r", ["s"], owner, 60),
            lambda: store.renew("r", owner, 60),
            lambda: store.release("r", owner),
        ):
            await asyncio.to_thread(_end_the_stores_connection, postgres_db)
            assert await asyncio.wait_for(call(), GUARD_S) in ([], None)
        await asyncio.to_thread(_end_the_stores_connection, postgres_db)
        with pytest.raises(RunNotFound):
            await asyncio.wait_for(store.load("r"), GUARD_S)
        await asyncio.to_thread(_end_the_stores_connection, postgres_db)
        with pytest.raises(StoreError, match="AdminShutdown"):
            await asyncio.wait_for(store.start_attempt("r", 1, 1), GUARD_S)
        with pytest.raises(RunNotFound):  # the next call has a new connection
            await asyncio.wait_for(store.start_attempt("r", 1, 1), GUARD_S)
        await store.aclose()

    asyncio.run(main())


def test_a_fleet_run_after_the_idle_store_lost_its_connection_runs(postgres_db: str) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db)
        await store.open()
        await asyncio.to_thread(_end_the_stores_connection, postgres_db)
        transport = SimTransport(driver())
        fleet = Fleet(transport, clock=loop_clock, store=store)
        result = await fleet.run([agents()[0].session("task", session_id="s0")], run_id="r")
        assert [s.status for s in result.sessions] == ["completed"]
        await store.aclose()
        await transport.aclose()

    run_virtual(main())
