"""``agentflow report --store`` counts a failed tool call as a tool error event, as the live
report does: ``fleet.errors.tool`` and the errors over time used to read 0 beside
``tool_errors`` 1 (the export's journal had the calls, not their error entries)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentflow import Agent, Fleet
from agentflow.embedded import loop_clock, run_virtual
from agentflow.stats import FleetStats
from agentflow.store import SQLiteStore, export_report
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest


async def slow(x: str) -> str:
    """Takes 2 s, then fails."""
    await asyncio.sleep(2.0)
    raise RuntimeError("boom")


def _reply(request: ChatRequest) -> Reply:
    if request.messages[-1]["role"] != "tool":
        return Reply.tool_call("slow", {"x": "a"})
    return Reply.text("ok")


def test_a_stored_runs_report_counts_its_failed_tool_calls_as_errors(tmp_path: Path) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        live = FleetStats(clock=loop_clock)
        async with SQLiteStore(tmp_path / "runs.db") as store:
            fleet = Fleet(
                MockTransport(_reply, clock=loop_clock),
                clock=loop_clock,
                callbacks=[live],
                store=store,
            )
            result = await fleet.run([Agent(name="a", model="m", tools=[slow]).session("go")])
            assert result.run_id is not None
            return live.report(), await export_report(store, result.run_id)

    live, stored = run_virtual(main())
    assert live["fleet"]["tool_errors"] == live["fleet"]["errors"]["tool"] == 1
    # a store keeps no callback failure: errors.callback is not measured
    want = dict(live["fleet"], errors={**live["fleet"]["errors"], "callback": None})
    for key in ("tool_calls", "tool_errors", "tool_s", "errors"):
        assert stored["fleet"][key] == want[key], key
    assert sum(stored["throughput"]["errors"]) == sum(live["throughput"]["errors"]) == 1
    # placed when the call failed: 2 s after its turn ended, as the live stats placed it
    assert _error_times(stored) == _error_times(live)


def _error_times(report: dict[str, Any]) -> list[float]:
    series = report["throughput"]
    return [t for t, n in zip(series["t_s"], series["errors"], strict=True) if n]
