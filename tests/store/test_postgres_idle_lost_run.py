"""A ``Fleet.run`` without a run id, through a PostgresStore whose idle connection was
lost (an administrator ended it; a server restart or an idle-session timeout does the
same), runs: ``open()`` checks the connection and makes a new one, so ``create_run`` —
which is not tried again, done twice it would not answer the same — runs on a live one.
It failed at once with the server up (a run with a run id read the run first, which
reconnected)."""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Fleet, RunNotFound
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore

from ..wait import GUARD_S
from .fleets import agents, driver
from .test_postgres_idle_lost import _end_the_stores_connection


def test_a_fleet_run_without_a_run_id_after_the_idle_connection_was_lost_runs(
    postgres_db: str,
) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db)
        await store.open()
        transport = SimTransport(driver())
        fleet = Fleet(transport, clock=loop_clock, store=store)
        first = await fleet.run([agents()[0].session("task", session_id="s0")])
        assert [s.status for s in first.sessions] == ["completed"]
        await asyncio.to_thread(_end_the_stores_connection, postgres_db)
        second = await fleet.run([agents()[0].session("task", session_id="s0")])
        assert [s.status for s in second.sessions] == ["completed"]
        assert second.run_id != first.run_id
        assert {r.run_id for r in await store.runs()} == {first.run_id, second.run_id}
        await store.aclose()
        await transport.aclose()

    run_virtual(main())


def test_open_replaces_a_lost_idle_connection_before_start_attempt(postgres_db: str) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db)
        await store.open()
        await asyncio.to_thread(_end_the_stores_connection, postgres_db)
        await asyncio.wait_for(store.open(), GUARD_S)
        with pytest.raises(RunNotFound):  # not the lost connection's AdminShutdown
            await asyncio.wait_for(store.start_attempt("r", 1, 1), GUARD_S)
        await store.aclose()

    asyncio.run(main())
