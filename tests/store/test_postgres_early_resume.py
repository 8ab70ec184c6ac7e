"""A worker that resumes a run just after another worker created it, while the sessions'
starts are still on their way to PostgreSQL, is refused (a ``StoreError`` saying why;
nothing recorded, nothing run). ``create_run`` commits the run's row at once and the
sessions in the batches that follow: such a resume loaded no session, ran nothing,
returned an empty result and marked the run ``finished`` — while the first worker still
ran it (and, killed, the run stayed ``finished`` with its sessions pending). A run is also
``finished`` only once the database holds every session it was created with, ended."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from agentflow import Fleet, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore
from agentflow.store._records import RunEnded, RunStarted

from ..wait import GUARD_S
from .fleets import agents, driver


class HeldAfterCreate(PostgresStore):
    """A store whose ``create_run`` (the run's row, committed) waits, once it has
    answered, until ``go`` is set — before the sessions' starts are written."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.created = asyncio.Event()
        self.go = asyncio.Event()

    async def create_run(self, record: RunStarted) -> None:
        await super().create_run(record)
        self.created.set()
        await self.go.wait()


def _rows(dsn: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET search_path TO agentflow")
        runs = conn.execute("SELECT status, sessions FROM runs").fetchall()
        attempts = conn.execute("SELECT attempt FROM run_attempts ORDER BY attempt").fetchall()
    return runs, attempts


def test_a_resume_before_the_runs_sessions_are_recorded_is_refused(postgres_db: str) -> None:
    async def main() -> None:
        first, second = HeldAfterCreate(postgres_db), PostgresStore(postgres_db)
        team = agents()
        sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i}") for i in range(6)]
        transport = SimTransport(driver())
        fleet = Fleet(transport, clock=loop_clock, store=first)
        running = asyncio.create_task(fleet.run(sessions, run_id="r"))
        await asyncio.wait_for(first.created.wait(), GUARD_S)
        # The run's row is committed, none of its sessions is.
        other = Fleet(transport, clock=loop_clock, store=second)
        with pytest.raises(StoreError, match=r"0 of its 6 sessions are recorded"):
            await asyncio.wait_for(other.resume("r", agents=team), GUARD_S)
        runs, attempts = await asyncio.to_thread(_rows, postgres_db)
        assert runs == [("running", 6)]  # it was 'finished'
        assert attempts == [(0,)]  # (the refused resume recorded no attempt)
        first.go.set()
        result = await asyncio.wait_for(running, GUARD_S)
        assert [s.status for s in result.sessions] == ["completed"] * 6
        assert (await asyncio.to_thread(_rows, postgres_db))[0] == [("finished", 6)]
        # Once they are recorded, a resume returns the whole run (nothing left to run).
        again = await asyncio.wait_for(other.resume("r", agents=team), GUARD_S)
        assert [s.session_id for s in again.sessions] == [f"s{i}" for i in range(6)]
        assert all(s.ok for s in again.sessions)
        for store in (first, second):
            await store.aclose()
        await transport.aclose()

    run_virtual(main())


def test_a_run_missing_some_of_its_sessions_is_not_finished(postgres_db: str) -> None:
    # An attempt that saw every session final (its own view) does not make the run
    # finished while the database lacks some of the sessions it was created with.
    async def main() -> None:
        store = PostgresStore(postgres_db)
        await store.open()
        await store.create_run(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=3))
        store.write(
            RunEnded(run_id="r", attempt=0, wall_ns=2, status="finished", retries=0, wall_s=0.0)
        )
        await asyncio.wait_for(store.flush(), GUARD_S)
        assert (await asyncio.to_thread(_rows, postgres_db))[0] == [("partial", 3)]
        await store.aclose()

    asyncio.run(main())
