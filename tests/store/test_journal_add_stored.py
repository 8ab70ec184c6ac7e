"""``RunJournal.add_stored``: a journal subscribed to ``Fleet.resume`` made the whole
run's. It noted that attempt's tool calls only, so ``from_result(resumed, journal=…)``
counted 8 tool calls beside every attempt's 16 turns, where ``report --store`` counted
12 — and a library user had no public way to add the earlier attempts' (the demo's
helper used a private function)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentflow import Agent, Fleet, FleetResult
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.stats import FleetStats, RunJournal
from agentflow.store import SQLiteStore, StoredRun, export_report, load_result
from tests.stats.test_report_schema import validate
from tests.store.test_doc_snippets import _run, _snippet


async def nap(s: float) -> str:
    """Nap."""
    await asyncio.sleep(5)
    return "ok"


AGENT = Agent(name="a", model="sim", tools=[nap])


def _transport() -> SimTransport:
    engine = Engine(
        "deepseek-v4.1-flash-gb300",
        seed=5,
        textgen=TextGenConfig(tool_rounds=3, answer_tokens=(10, 30)),
    )
    return SimTransport(EngineDriver(engine))


def _tool_figures(report: dict[str, Any]) -> dict[str, Any]:
    f = report["fleet"]
    return {
        "fleet": (f["tool_calls"], f["tool_errors"], f["tool_s"], f["errors"]["tool"]),
        "tools": {k: (v["calls"], v["errors"], v["total_s"]) for k, v in report["tools"].items()},
        "agents": sorted((a["session_id"], a["tool_calls"], a["tool_s"]) for a in report["agents"]),
        "turns": f["turns"],
        "compaction": f["compaction"],
    }


async def _first_attempt(db: Path) -> None:
    """Run r1 and cut it 7 s in (virtual time), as if killed."""
    transport = _transport()
    async with SQLiteStore(db) as store:
        fleet = Fleet(transport, max_concurrency=3, clock=loop_clock, store=store)
        sessions = [AGENT.session(f"task {i}", session_id=f"s{i}") for i in range(4)]
        try:
            await asyncio.wait_for(fleet.run(sessions, run_id="r1"), 7)
        except TimeoutError:
            pass
        finally:
            await transport.aclose()


def _resumed_run(
    db: Path, journal: RunJournal
) -> tuple[FleetResult, FleetResult, StoredRun, dict[str, Any]]:
    """A run cut 7 s in (virtual time), resumed with ``journal`` subscribed: the resumed
    result, the result read back, the stored run and ``report --store``'s report."""

    async def second() -> tuple[FleetResult, FleetResult, StoredRun, dict[str, Any]]:
        transport = _transport()
        async with SQLiteStore(db) as store:
            fleet = Fleet(
                transport, max_concurrency=3, clock=loop_clock, store=store, callbacks=[journal]
            )
            try:
                resumed = await fleet.resume("r1", agents=[AGENT])
            finally:
                await transport.aclose()
            read_back = await load_result(store, "r1")
            return resumed, read_back, await store.load("r1"), await export_report(store, "r1")

    run_virtual(_first_attempt(db))
    return run_virtual(second())


def test_a_resumed_runs_journal_made_the_whole_runs(tmp_path: Path) -> None:
    journal = RunJournal(loop_clock)
    resumed, _, run, stored = _resumed_run(tmp_path / "runs.db", journal)
    assert [s.status for s in resumed.sessions] == ["completed"] * 4
    this_attempt = sum(e.kind == "tool" for e in journal.entries)
    assert this_attempt == 8
    journal.add_stored(run)
    report = FleetStats.from_result(resumed, journal=journal, per="session").report()
    validate(report)
    assert report["fleet"]["tool_calls"] == 12 > this_attempt
    assert _tool_figures(report) == _tool_figures(stored)
    assert report["fleet"]["compaction"] is None  # the earlier attempts' were not seen
    # Every call's entry is on the resumed result's clock: at its turn's end there.
    ends: dict[tuple[str | None, int | None], int] = {
        (s.session_id, t.index): t.trace.end_ns for s in resumed.sessions for t in s.turns
    }
    tools = [e for e in journal.entries if e.kind == "tool"]
    assert len(tools) == 12
    assert all(e.t_ns == ends[e.session_id, e.turn] for e in tools)


def test_a_read_back_results_journal_on_the_first_attempts_clock(tmp_path: Path) -> None:
    journal = RunJournal(loop_clock)
    _, read_back, run, stored = _resumed_run(tmp_path / "runs.db", journal)
    journal.add_stored(run, to_attempt=0)
    report = FleetStats.from_result(read_back, journal=journal, per="session").report()
    assert _tool_figures(report) == _tool_figures(stored)
    ends: dict[tuple[str | None, int | None], int] = {
        (s.session_id, t.index): t.trace.end_ns for s in read_back.sessions for t in s.turns
    }
    assert all(e.t_ns == ends[e.session_id, e.turn] for e in journal.entries if e.kind == "tool")


def test_the_stats_pages_resume_snippet(tmp_path: Path) -> None:
    """docs/stats.md's snippet, run as it is, reports every attempt's tool calls."""
    code = _snippet("stats.md", "journal.add_stored(")
    run_virtual(_first_attempt(tmp_path / "runs.db"))

    async def main() -> dict[str, Any]:
        transport = _transport()
        async with SQLiteStore(tmp_path / "runs.db") as store:
            namespace: dict[str, Any] = {
                "Fleet": Fleet,
                "FleetStats": FleetStats,
                "RunJournal": RunJournal,
                "transport": transport,
                "clock": loop_clock,
                "store": store,
                "run_id": "r1",
                "agents": [AGENT],
            }
            try:
                await _run(code, namespace)
            finally:
                await transport.aclose()
            report: dict[str, Any] = namespace["report"]
            return report

    assert run_virtual(main())["fleet"]["tool_calls"] == 12
