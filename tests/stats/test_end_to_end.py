"""A real fleet on the in-process simulator (virtual time): the report agrees with FleetResult."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentflow import Agent, Fleet, FleetResult
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.stats import (
    SLO,
    FleetStats,
    PrometheusExporter,
    TurnCSVWriter,
    nearest_rank,
    read_turn_csv,
)
from tests.stats.test_merge import assert_same
from tests.stats.test_report_schema import validate


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def nap(seconds: float) -> str:
    """A tool that takes simulated time."""
    await asyncio.sleep(seconds)
    return "rested"


def run_fleet(*callbacks: Any) -> FleetResult:
    """24 sessions of 3–4 turns against the simulated rack, 8 requests at a time."""
    agents = [
        Agent(name=f"coder-{i}", model="sim", tools=[lookup, nap], instructions="Shared. " * 150)
        for i in range(6)
    ]

    async def main() -> FleetResult:
        engine = Engine(
            "deepseek-v4.1-flash-gb300",
            seed=3,
            textgen=TextGenConfig(tool_rounds=3, answer_tokens=(30, 90)),
        )
        transport = SimTransport(EngineDriver(engine))
        fleet = Fleet(transport, max_concurrency=8, clock=loop_clock, callbacks=list(callbacks))
        try:
            return await fleet.run(
                agents[i % 6].session(f"task {i}", session_id=f"s{i:02d}") for i in range(24)
            )
        finally:
            await transport.aclose()

    return run_virtual(main())


def test_report_agrees_with_fleet_result() -> None:
    """Totals equal FleetResult's; quantiles within α of the exact ones; CSV and /metrics too."""
    slo = SLO(ttft_s=0.05, tpot_s=0.002)
    stats = FleetStats(slos=[slo], per="session", bucket_s=0.1)
    csv_file = io.StringIO()
    writer = TurnCSVWriter(csv_file)
    prom = PrometheusExporter()
    result = run_fleet(stats, writer, prom)
    assert not result.failed and not result.callback_errors
    report = stats.report(run={"test": "e2e"})
    validate(report)

    turns = [t.metrics for s in result.sessions for t in s.turns]
    f = report["fleet"]
    assert f["sessions"] == len(result.sessions) == 24 and f["completed"] == 24
    assert f["turns"] == len(turns)
    assert f["wall_s"] == result.wall_s and f["peak_in_flight"] == result.peak_in_flight == 8
    assert f["output_tokens"] == result.output_tokens
    assert f["output_tps"] == pytest.approx(result.output_tps, rel=1e-12)
    assert f["prompt_tokens"] == sum(m.prompt_tokens or 0 for m in turns)
    assert f["cached_tokens"] == sum(m.cached_tokens or 0 for m in turns)
    assert f["cache_hit_rate"] == pytest.approx(f["cached_tokens"] / f["prompt_tokens"])
    assert 0 < f["cache_hit_rate"] < 1  # the shared instructions hit the simulated cache
    assert f["tool_calls"] == sum(len(t.trace.tool_calls) for s in result.sessions for t in s.turns)

    # Distributions: counts exact, quantiles within α of exact nearest-rank values.
    alpha = report["settings"]["relative_accuracy"]
    for name, values in {
        "ttft_s": [m.ttft_s for m in turns if m.ttft_s is not None],
        "tpot_s": [m.tpot_s for m in turns if m.tpot_s is not None],
        "e2e_s": [m.e2e_s for m in turns],
        "queue_wait_s": [m.queue_wait_s for m in turns],
        "itl_s": [x for m in turns for x in m.itl_s],
        "decode_tps": [m.decode_tps for m in turns if m.decode_tps is not None],
    }.items():
        d, ordered = report["distributions"][name], sorted(values)
        assert d["count"] == len(values), name
        for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            true = ordered[nearest_rank(q, len(ordered))]
            assert abs(d[key] - true) <= alpha * true + 1e-12, (name, key, d[key], true)

    # Per session: turns and tokens; goodput against a hand count.
    rows = {a["session_id"]: a for a in report["agents"]}
    for s in result.sessions:
        row = rows[s.session_id]
        assert row["turns"] == len(s.turns) and row["output_tokens"] == s.output_tokens
        assert row["status"] == "completed"
    (good,) = report["goodput"]
    assert good["turns_met"] == sum(slo.met_by(m) for m in turns)
    assert good["turns_per_s"] == pytest.approx(good["turns_met"] / result.wall_s)

    # Throughput over time integrates back to the totals.
    t = report["throughput"]
    assert sum(r * dt for r, dt in zip(t["output_tps"], t["dt_s"], strict=True)) == (
        pytest.approx(result.output_tokens)
    )
    assert sum(r * dt for r, dt in zip(t["prompt_tps"], t["dt_s"], strict=True)) == (
        pytest.approx(f["prompt_tokens"])
    )
    assert max(t["in_flight"]) <= 8 + 1e-9  # never more than the admission bound

    # The CSV has one row per turn, the exporter the same totals.
    writer.close()
    csv_file.seek(0)
    assert len(read_turn_csv(csv_file)) == len(turns)
    fams = {
        s.name: s.value
        for fam in text_string_to_metric_families(prom.text())
        for s in fam.samples
        if not s.labels
    }
    assert fams["agentflow_turns_total"] == len(turns)
    assert fams["agentflow_prompt_tokens_total"] == f["prompt_tokens"]
    assert fams["agentflow_sessions_active"] == 0


def test_from_result_equals_subscribing() -> None:
    """FleetStats.from_result gives the subscribed report, minus what a result cannot keep."""
    live = FleetStats(per="session")
    result = run_fleet(live)
    after = FleetStats.from_result(result, per="session")
    a, b = live.report(), after.report()
    for r in (a, b):  # tool outcomes and durations come only from events: null in b
        r["fleet"].update(tool_s=None, tool_errors=None, compaction=None)
        r["fleet"]["errors"]["tool"] = None
        r["tools"] = {}
        for row in r["agents"]:
            row.update(tool_s=None, tool_errors=None)
    assert_same(b, a)


def test_from_result_equals_subscribing_per_agent() -> None:
    """The same with one row per agent (the default), whose sessions overlap in time:
    from_result folds session by session, yet every row's figures are the subscribed ones
    (the largest context was lost when a session ended before the row's latest turn; the
    row's session was the last one in the result's order, not the last to end)."""
    live = FleetStats(per="agent")
    result = run_fleet(live)
    after = FleetStats.from_result(result, per="agent")
    a, b = live.report(), after.report()
    for r in (a, b):
        r["fleet"].update(tool_s=None, tool_errors=None, compaction=None)
        r["fleet"]["errors"]["tool"] = None
        r["tools"] = {}
        for row in r["agents"]:
            row.update(tool_s=None, tool_errors=None)
    truth: dict[str, int] = {}
    for s in result.sessions:
        for t in s.turns:
            truth[s.agent] = max(truth.get(s.agent, 0), t.metrics.prompt_tokens or 0)
    assert {row["agent"]: row["max_context_tokens"] for row in b["agents"]} == truth
    assert_same(b, a)
