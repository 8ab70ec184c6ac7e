"""The HTML runs table of a stored run exported while it runs: its sessions cell counts
those that had not ended (``fleet.unfinished``), which it used to leave out — a run with
six sessions under way read ``0/0``."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from agentflow import Event, Fleet
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.report import Run
from agentflow.report._html import render_html
from agentflow.store import SQLiteStore, export_report
from tests.store.fleets import agents, driver


async def _report_while_running(db: Path) -> dict[str, Any]:
    members = agents()
    todo = [members[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(6)]
    ends = 0
    midway = asyncio.Event()

    def watch(event: Event) -> None:
        nonlocal ends
        ends += event.type == "turn_end"
        if ends == 4:
            midway.set()

    transport = SimTransport(driver())
    try:
        async with SQLiteStore(db) as store:
            fleet = Fleet(
                transport, store=store, callbacks=[watch], max_concurrency=2, clock=loop_clock
            )
            running = asyncio.ensure_future(fleet.run(todo, run_id="run-1"))
            await midway.wait()
            await store.flush()
            async with SQLiteStore(db, journal=False) as reader:
                during = await export_report(reader, "run-1")
            await running
    finally:
        await transport.aclose()
    return during


def test_the_runs_table_counts_a_running_runs_unfinished_sessions(tmp_path: Path) -> None:
    report = run_virtual(_report_while_running(tmp_path / "runs.db"))
    fleet = report["fleet"]
    assert (fleet["completed"], fleet["sessions"], fleet["unfinished"]) == (0, 0, 6)
    page = render_html([Run("during", report)], [], title="t")
    row = re.search(r'<tr><td class="text">during</td><td>([^<]*)</td>', page)
    assert row and row[1] == "0/0 (+6 unfinished)"


def test_a_run_that_ended_reads_ok_of_all() -> None:
    fleet = {"completed": 5, "sessions": 6, "unfinished": 0}
    page = render_html([Run("done", {"fleet": fleet})], [], title="t")
    row = re.search(r'<tr><td class="text">done</td><td>([^<]*)</td>', page)
    assert row and row[1] == "5/6"
