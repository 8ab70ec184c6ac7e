"""``fleet.tool_calls`` counts the calls that ran, wherever the report comes from: a run
cancelled while its tools ran asked for 8 calls and ran 4; ``report --store`` (and
``from_result`` with the run's journal) said 8 beside its tools' 4 calls, the live report
and Prometheus 4."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentflow import Agent, Fleet, FleetResult
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.stats import FleetStats, PrometheusExporter, RunJournal
from agentflow.store import SQLiteStore, export_report, load_result
from tests.stats.test_report_schema import validate


async def nap(s: float) -> str:
    """Nap."""
    await asyncio.sleep(5)
    return "ok"


def tool_figures(report: dict[str, Any]) -> dict[str, Any]:
    """A report's tool figures: the fleet's, per tool, per session."""
    f = report["fleet"]
    return {
        "fleet": (f["tool_calls"], f["tool_errors"], f["tool_s"], f["errors"]["tool"]),
        "tools": {k: (v["calls"], v["errors"], v["total_s"]) for k, v in report["tools"].items()},
        "agents": [(a["session_id"], a["tool_calls"], a["tool_s"]) for a in report["agents"]],
    }


def test_a_run_cancelled_mid_tool_counts_the_calls_that_ran(tmp_path: Path) -> None:
    live, journal = FleetStats(clock=loop_clock, per="session"), RunJournal(loop_clock)
    prom = PrometheusExporter()
    engine = Engine(
        "deepseek-v4.1-flash-gb300",
        seed=5,
        textgen=TextGenConfig(tool_rounds=3, answer_tokens=(10, 30)),
    )
    agent = Agent(name="a", model="sim", tools=[nap])

    async def main() -> tuple[FleetResult, dict[str, Any]]:
        transport = SimTransport(EngineDriver(engine))
        async with SQLiteStore(tmp_path / "runs.db") as store:
            fleet = Fleet(
                transport,
                max_concurrency=3,
                clock=loop_clock,
                callbacks=[live, journal, prom],
                store=store,
            )
            sessions = [agent.session(f"task {i}", session_id=f"s{i}") for i in range(4)]
            try:  # cancelled 7 s in (virtual time): each session's second call is running
                await asyncio.wait_for(fleet.run(sessions, run_id="r1"), 7)
            except TimeoutError:
                pass
            finally:
                await transport.aclose()
            return await load_result(store, "r1"), await export_report(store, "r1")

    result, stored = run_virtual(main())
    assert {s.status for s in result.sessions} == {"cancelled"}
    asked = sum(len(t.trace.tool_calls) for s in result.sessions for t in s.turns)
    ran = prom.tool_calls["ok"] + prom.tool_calls["error"]
    assert ran == 4 < asked == 8
    reports = {
        "live": live.report(),
        "from_result": FleetStats.from_result(result, journal=journal, per="session").report(),
        "store": stored,
    }
    for name, report in reports.items():
        validate(report)
        f = report["fleet"]
        assert f["tool_calls"] == sum(t["calls"] for t in report["tools"].values()) == ran, name
        assert sum(a["tool_calls"] for a in report["agents"]) == ran, name
    assert tool_figures(reports["from_result"]) == tool_figures(reports["live"])
    assert tool_figures(reports["store"]) == tool_figures(reports["live"])
    # without its journal a result knows only the calls asked for (documented so)
    assert FleetStats.from_result(result).report()["fleet"]["tool_calls"] == asked
