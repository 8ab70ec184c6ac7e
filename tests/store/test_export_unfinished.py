"""A run read from the store while it runs (or after it was killed): its sessions with no
recorded end are ``fleet.unfinished``, not ended ``cancelled`` sessions — every running
session was counted in ``sessions``, ``failed`` and ``statuses.cancelled``, though
``sessions`` counts the sessions that ended (``docs/report-schema.md``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jsonschema

from agentflow import Event, Fleet
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.stats import report_schema
from agentflow.store import SQLiteStore, export_report
from tests.store.fleets import agents, driver
from tests.wait import GUARD_S


async def reports_midway(db: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report of run ``run-1`` (six sessions, two at a time) exported from the store
    at ``db`` after its fourth turn ended, and once it has ended."""
    members = agents()
    todo = [members[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(6)]
    ends = 0
    midway = asyncio.Event()

    def watch(event: Event) -> None:
        nonlocal ends
        ends += event.type == "turn_end"
        if ends == 4:
            midway.set()

    store, tr = SQLiteStore(db), SimTransport(driver())
    fleet = Fleet(tr, store=store, callbacks=[watch], max_concurrency=2, clock=loop_clock)
    running = asyncio.ensure_future(fleet.run(todo, run_id="run-1"))
    try:
        await asyncio.wait_for(midway.wait(), GUARD_S)
        await store.flush()
        async with SQLiteStore(db, journal=False) as reader:
            during = await export_report(reader, "run-1")
        result = await running
        assert all(s.status == "completed" for s in result.sessions)
    finally:
        await store.aclose()
        await tr.aclose()
    async with SQLiteStore(db, journal=False) as reader:
        after = await export_report(reader, "run-1")
    return during, after


def test_a_running_runs_report_counts_its_running_sessions_apart(tmp_path: Path) -> None:
    during, after = run_virtual(reports_midway(tmp_path / "runs.db"))
    for report in (during, after):
        jsonschema.validate(report, report_schema())
    f = during["fleet"]
    ended = [a for a in during["agents"] if a["status"] is not None]
    assert during["run"]["status"] == "running" and f["turns"] >= 4
    assert f["statuses"]["cancelled"] == 0
    assert f["unfinished"] > 0 and f["unfinished"] + f["sessions"] == 6
    assert f["sessions"] == len(ended) == f["completed"] and f["failed"] == 0
    unfinished = [a for a in during["agents"] if a["status"] is None]
    assert len(unfinished) == f["unfinished"] and all(a["sessions"] == 0 for a in unfinished)
    f = after["fleet"]
    assert (f["sessions"], f["completed"], f["unfinished"]) == (6, 6, 0)
