"""A resume of a run with more sessions than one SQL statement takes parameters for
(SQLite's default build: 32,766): ``store.load(run_id, ids)`` asked for every id in one
``IN (...)`` and failed with "too many SQL variables", and ``Fleet(workers=N).resume``,
which claims and loads every session it runs at once, asked again at every tick, for
ever — its gate took any ``StoreError`` for an outage. The load now asks ``ids`` a
chunk at a time, and a gate the store keeps refusing gives up with the store's error.

The variable limit is lowered on the store's connection (``Connection.setlimit``), so
that a few sessions are more than a statement takes."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow._session import Session
from agentflow.embedded import run_virtual
from agentflow.store import SQLiteStore
from agentflow.store._claims import CLAIM_TRIES, Ticker
from agentflow.store._durable import DurableRun

from ..wait import GUARD_S
from .fleets import agents, run_cut

SESSIONS = 6


async def _limit(store: SQLiteStore, n: int) -> None:
    """At most ``n`` parameters in one statement on the store's connection."""

    def lower(conn: sqlite3.Connection) -> None:
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, n)

    await store._call(lower)


class _Instant(Ticker):
    """Ticks at once (the gate's waits between claims), so a test need not wait out
    real seconds per claim."""

    async def wait(self) -> None:
        await asyncio.sleep(0)


def test_a_load_of_more_sessions_than_a_statement_takes(tmp_path: Path) -> None:
    db = tmp_path / "many.db"
    assert run_virtual(run_cut(db, agents(), SESSIONS, None)) is not None

    async def main() -> None:
        async with SQLiteStore(db, journal=False) as store:
            whole = await store.load("run-1")
            await _limit(store, 3)  # two ids a query, beside the run's id
            ids = [s.session_id for s in whole.sessions]
            assert len(ids) == SESSIONS
            picked = await store.load("run-1", [*reversed(ids), ids[0]])
            assert picked == whole  # every session once, in the run's order, all its rows
            assert sum(len(t.tool_results) for s in picked.sessions for t in s.turns) > 0
            some = await store.load("run-1", ids[3:0:-1])
            assert [s.session_id for s in some.sessions] == ids[1:4]
            assert (await store.load("run-1", [])).sessions == []

    asyncio.run(main())


async def _resumed(db: Path) -> tuple[SQLiteStore, DurableRun]:
    store = SQLiteStore(db, journal=False)
    durable = await DurableRun.resumed(
        store, "run-1", agents(), clock=lambda: 0, lease_ttl_s=30.0, window=8
    )
    assert durable.gate is not None
    durable.gate.ticker = _Instant(10.0)
    return store, durable


def test_a_resume_with_workers_admits_more_sessions_than_a_statement_takes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cut.db"
    assert run_virtual(run_cut(db, agents(), 48, 5)) is None

    async def main() -> None:
        store, durable = await _resumed(db)
        try:
            unfinished = len(durable.to_run)
            assert unfinished > 2 * 19
            await _limit(store, 20)  # 19 ids a query (the widest write takes 18)
            await asyncio.wait_for(durable.admit_all(), GUARD_S)
            assert len(durable.entries) == 48
            assert len(durable.to_run) == unfinished  # each read again, to run
            assert all(isinstance(e, Session) for e in durable.to_run)
        finally:
            await durable.finish(None)
            await store.aclose()

    asyncio.run(main())


def test_a_store_that_keeps_refusing_claims_ends_the_resume(tmp_path: Path) -> None:
    db = tmp_path / "cut.db"
    assert run_virtual(run_cut(db, agents(), SESSIONS, 5)) is None

    async def main() -> None:
        store, durable = await _resumed(db)
        gate = durable.gate
        assert gate is not None
        conn = sqlite3.connect(db)  # every session's row damaged after the plan was made
        conn.execute("UPDATE sessions SET task='[' WHERE run_id='run-1'")
        conn.commit()
        conn.close()
        try:
            with pytest.raises(StoreError, match=r"column sessions\.task cannot be read"):
                await asyncio.wait_for(durable.admit_all(), GUARD_S)
            assert gate.failures == CLAIM_TRIES  # asked again at each tick, then given up
        finally:
            await durable.finish(None)
            await store.aclose()

    asyncio.run(main())
