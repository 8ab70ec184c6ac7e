"""``Fleet(workers=2)`` with a :class:`PostgresStore` (the session's PostgreSQL server),
against the HTTP simulator on loopback: the parent writes what the workers record, the
same sessions, turns and tool results as a one-process run in SQLite; cancelled partway,
the run resumes on two workers to the uninterrupted transcripts, each turn once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentflow import Event, Fleet, HTTPTransport
from agentflow.store import PostgresStore, SQLiteStore, Store
from tests.sched.conftest import RecordingSim
from tests.workers.tools import PLAIN, TOOL, workload

RUN = "run-pg"


async def _rows(store: Store) -> list[tuple[Any, ...]]:
    run = await store.load(RUN)
    return [
        (
            s.session_id,
            s.status,
            s.final_output,
            [t.message for t in s.turns],
            sorted((cid, r.output) for t in s.turns for cid, r in t.tool_results.items()),
        )
        for s in run.sessions
    ]


async def test_postgres_on_workers_records_and_resumes(tmp_path: Path, postgres_db: str) -> None:
    """One process into SQLite, two workers into PostgreSQL: the same rows. Then a
    two-worker run cancelled after 4 turn ends resumes on two workers to the same
    transcripts, no turn recorded twice."""
    sqlite = SQLiteStore(tmp_path / "one.db")
    try:
        async with RecordingSim(seed=5) as sim, HTTPTransport(sim.base_url) as http:
            one = await Fleet(http, max_concurrency=4, store=sqlite).run(workload(12), run_id=RUN)
        expected = await _rows(sqlite)
    finally:
        await sqlite.aclose()
    pg = PostgresStore(postgres_db)
    try:
        async with RecordingSim(seed=5) as sim, HTTPTransport(sim.base_url) as http:
            two = await Fleet(http, max_concurrency=4, workers=2, store=pg).run(
                workload(12), run_id=RUN
            )
        assert not two.failed, [s.error for s in two.failed]
        assert await _rows(pg) == expected
        assert await pg.conflicts(RUN) == []
    finally:
        await pg.aclose()
    assert not one.failed

    ended = 0
    enough = asyncio.Event()

    def count(event: Event) -> None:
        nonlocal ended
        if event.type == "turn_end":
            ended += 1
            if ended >= 4:
                enough.set()

    cut = PostgresStore(postgres_db)
    try:
        async with RecordingSim(seed=5) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, store=cut, callbacks=[count])
            task = asyncio.create_task(fleet.run(workload(12), run_id="cut"))
            await asyncio.wait_for(enough.wait(), 60)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        async with RecordingSim(seed=5) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, store=cut)
            resumed = await fleet.resume("cut", agents=[PLAIN, TOOL])
        assert await cut.conflicts("cut") == []
        run = await cut.load("cut")
    finally:
        await cut.aclose()
    assert not resumed.failed, [s.error for s in resumed.failed]
    for a, b in zip(one.sessions, resumed.sessions, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
    assert sum(len(s.turns) for s in run.sessions) == 18
    assert {s.status for s in run.sessions} == {"completed"}
