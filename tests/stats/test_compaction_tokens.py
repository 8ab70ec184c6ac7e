"""A context policy's summary requests are in the fleet's token totals: the server did
that work for the fleet. They used to be in no figure — no turn, no ``TurnEndEvent`` —
so ``fleet.output_tokens``, ``prompt_tokens`` and ``output_tps`` fell short of what the
server served (17 of 24 output tokens here). ``fleet.compaction`` has them apart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agentflow import Agent, Fleet, FleetResult
from agentflow.context import Compact, ContextBudget
from agentflow.context._compact import DEFAULT_SUMMARY_PROMPT
from agentflow.embedded import loop_clock, run_virtual
from agentflow.stats import FleetStats, PrometheusExporter, RunJournal
from agentflow.testing import MockTransport, Reply, capture_events
from agentflow.transport import ChatRequest
from tests.stats.test_report_schema import validate

#: Virtual seconds the summary request takes.
SUMMARY_S = 2.0


def big(x: str) -> str:
    """A big output."""
    return "lorem ipsum dolor " * 90


class Server:
    """Tool calls until four tool results are in the prompt, then an answer; the summary
    request takes :data:`SUMMARY_S`. Counts what it served, as a server's counters do."""

    def __init__(self) -> None:
        self.served = {"requests": 0, "summaries": 0, "prompt": 0, "completion": 0}

    async def __call__(self, request: ChatRequest) -> Reply:
        served = self.served
        served["requests"] += 1
        prompt = len(json.dumps(request.messages)) // 4
        if request.messages[0].get("content") == DEFAULT_SUMMARY_PROMPT:
            await asyncio.sleep(SUMMARY_S)
            served["summaries"] += 1
            reply, completion = Reply.text("summary of it", prompt_tokens=900), 3
            prompt = 900
        else:
            await asyncio.sleep(0.02)
            tools = sum(m["role"] == "tool" for m in request.messages)
            if tools < 4 and served["requests"] < 5:
                reply = Reply.tool_call(
                    "big", {"x": "a"}, call_id=f"c{served['requests']}", prompt_tokens=prompt
                )
                completion = 1 + 3  # the call's first chunk, then its argument deltas
            else:
                reply, completion = Reply.text("ok !", prompt_tokens=prompt), 2
        served["prompt"] += prompt
        served["completion"] += completion
        return reply


def run_compacted(
    *subscribed: Any,
) -> tuple[dict[str, int], FleetStats, RunJournal, FleetResult, list[Any]]:
    """The compacting run, with ``subscribed`` callbacks too."""
    server = Server()

    async def main() -> tuple[FleetStats, RunJournal, FleetResult, list[Any]]:
        live, journal, events = (
            FleetStats(clock=loop_clock),
            RunJournal(loop_clock),
            capture_events(),
        )
        agent = Agent(
            name="a",
            model="m",
            tools=[big],
            max_turns=8,
            context=ContextBudget(window=1500, reserve_output=100, overflow=Compact(keep_last=1)),
        )
        fleet = Fleet(
            MockTransport(server, clock=loop_clock),
            clock=loop_clock,
            callbacks=[live, journal, events, *subscribed],
        )
        result = await fleet.run([agent.session("go")])
        return live, journal, result, events.events

    live, journal, result, events = run_virtual(main())
    return server.served, live, journal, result, events


def test_a_summary_requests_tokens_are_in_the_fleets_totals() -> None:
    served, live, journal, result, events = run_compacted()
    assert result.sessions[0].status == "completed"
    assert served["summaries"] == 1 and served["requests"] == len(result.sessions[0].turns) + 1
    (compaction,) = [e for e in events if e.type == "compaction"]
    report = live.report()
    validate(report)
    fleet = report["fleet"]
    assert fleet["turns"] == served["requests"] - 1
    assert fleet["output_tokens"] == served["completion"]
    assert fleet["prompt_tokens"] == served["prompt"]
    assert fleet["output_tps"] == served["completion"] / fleet["duration_s"]
    assert fleet["compaction"] == {
        "requests": 1,
        "prompt_tokens": 900,
        "cached_tokens": 0,
        "output_tokens": 3,
        "e2e_s": (compaction.trace.end_ns - compaction.trace.sent_ns) / 1e9,
    }
    assert fleet["compaction"]["e2e_s"] >= SUMMARY_S
    # over time too: the throughput series add up to the totals
    series = report["throughput"]
    out = sum(r * dt for r, dt in zip(series["output_tps"], series["dt_s"], strict=True))
    assert round(out) == served["completion"]
    # per-turn figures are the turns' only
    assert report["distributions"]["output_tokens"]["count"] == fleet["turns"]
    assert sum(r["output_tokens"] for r in report["agents"]) == served["completion"] - 3
    assert result.output_tokens == served["completion"] - 3  # FleetResult: turns only

    # from the result with its journal: the same; without it, not measured
    after = FleetStats.from_result(result, journal=journal).report()
    validate(after)
    assert after["fleet"]["compaction"] == fleet["compaction"]
    assert after["fleet"]["output_tokens"] == served["completion"]
    bare = FleetStats.from_result(result).report()
    assert bare["fleet"]["compaction"] is None
    assert bare["fleet"]["output_tokens"] == served["completion"] - 3

    # merged: added up
    total = FleetStats()
    total.merge(live)
    total.merge(FleetStats.from_result(result, journal=journal))
    assert total.report()["fleet"]["compaction"]["requests"] == 2


def test_the_prometheus_exporter_counts_summary_requests_apart() -> None:
    """The exporter counted no summary request: its counters fell short of what the server
    served by the summaries' tokens, with nothing to add them back from."""
    exporter = PrometheusExporter()  # subscribed: it is given the event types it reads
    served, live, _, _, _ = run_compacted(exporter)
    fams = {f.name: f for f in text_string_to_metric_families(exporter.text())}
    (compactions,) = fams["agentflow_compactions"].samples
    assert compactions.value == 1
    kinds = {s.labels["kind"]: s.value for s in fams["agentflow_compaction_tokens"].samples}
    assert kinds == {"prompt": 900, "cached": 0, "output": 3}
    turns_out = sum(s.value for s in fams["agentflow_output_tokens"].samples)
    assert turns_out + kinds["output"] == served["completion"]
    assert live.report()["fleet"]["compaction"]["output_tokens"] == kinds["output"]
