"""Errors and retries over time, from a real fleet on the simulator with faults: a
subscribed FleetStats (placing events at the fleet's clock) and one built from the
result agree on the counts, and every event lands in a bucket of the run."""

from __future__ import annotations

import time

import jsonschema

from agentflow import Agent, Fleet, RetryPolicy
from agentflow.sim.faults import FaultConfig
from agentflow.sim.server import SimServer
from agentflow.stats import FleetStats, report_schema
from agentflow.transport import HTTPTransport
from tests.sim.simhttp import QUICK


async def test_errors_and_retries_are_counted_in_time() -> None:
    faults = FaultConfig(server_error=0.3, reset_mid_stream=0.15, seed=5)
    async with SimServer(QUICK, faults=faults) as sim, HTTPTransport(sim.base_url) as transport:
        start = time.perf_counter_ns()
        live = FleetStats(clock=time.perf_counter_ns, start_ns=start, bucket_s=0.05)
        fleet = Fleet(
            transport,
            max_concurrency=4,
            callbacks=[live],
            retry=RetryPolicy(max_attempts=2, backoff_s=0.001, jitter=False),
        )
        agent = Agent(name="a", model="quick", params={"max_tokens": 16})
        result = await fleet.run(agent.session(f"Task {i}.", session_id=f"s{i}") for i in range(24))
    errored = [s for s in result.sessions if s.status == "error"]
    # 45 % of requests fail and only one retry is allowed: some turns were retried and
    # succeeded, some sessions ran out of attempts.
    assert result.retries > 0 and errored

    report = live.report()
    jsonschema.validate(report, report_schema())
    tp, f = report["throughput"], report["fleet"]
    assert sum(tp["retries"]) == f["retries"] == result.retries
    assert sum(tp["errors"]) == f["errors"]["session"] == len(errored)
    assert all(0 <= t <= f["duration_s"] for t in tp["t_s"])

    # From the result alone: the same session errors; the retries of turns that finished.
    post = FleetStats.from_result(result, start_ns=start, bucket_s=0.05).report()
    finished = sum(len(t.failed_attempts) for s in result.sessions for t in s.turns)
    assert sum(post["throughput"]["retries"]) == finished > 0
    assert sum(a["retries"] for a in post["agents"]) == finished
    # Every failed session is counted, and in time (at its result's end_ns), those that
    # failed on their first turn too.
    assert post["fleet"]["errors"]["session"] == len(errored)
    assert sum(post["throughput"]["errors"]) == len(errored)
