"""Run a fleet against the simulator and draw its report: figures, server cross-check.

What it does, in the order a real benchmark would:

1. start agentflow's simulator in a child process (vLLM-like, real HTTP on loopback);
2. run 24 coding agents through it with ``FleetStats`` (every turn kept), a
   ``LoopLagProbe`` (the client's own event-loop lag) and a ``ServerWatch`` (the
   server's ``/metrics`` before, during and after the run);
3. write the ``agentflow.report/2`` JSON with its ``server`` section, and the HTML page.

    python examples/fleet_report.py                 # writes into a temporary directory
    python examples/fleet_report.py --out reports/  # …or here
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentflow import Fleet, HTTPTransport
from agentflow._process import ChildServer, free_port
from agentflow.demo.workload import make_workload
from agentflow.report import LoopLagProbe, ServerWatch, write_report
from agentflow.stats import FleetStats

TIME_SCALE = 10.0
AGENTS = 24


async def run_fleet(base_url: str) -> dict[str, Any]:
    workload = make_workload(AGENTS, model="agentflow-sim", seed=1, turns=(4, 12), max_tokens=96)
    stats = FleetStats(
        per="session", keep_samples=True, bucket_s=0.25, start_ns=time.perf_counter_ns()
    )
    async with (
        HTTPTransport(f"{base_url}/v1") as transport,
        ServerWatch(base_url, interval_s=0.25) as watch,
        LoopLagProbe() as lag,
    ):
        fleet = Fleet(transport, max_concurrency=AGENTS, callbacks=[stats])
        sessions = [a.session(t) for a, t in zip(workload.agents, workload.tasks, strict=True)]
        await fleet.run(sessions)
    run = {"label": "demo workload", "time_scale": TIME_SCALE, "loop_lag": lag.summary()}
    report = stats.report(run=run, include_samples=True)
    report["server"] = watch.section(report, origin_ns=stats.origin_ns)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory for the JSON and HTML")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="agentflow-report-"))
    port = free_port()
    cmd = [
        sys.executable, "-m", "agentflow.sim", "--port", str(port), "--quiet",
        "--profile", "deepseek-v4.1-flash-gb300", "--time-scale", f"{TIME_SCALE:g}",
    ]  # fmt: skip
    with ChildServer(cmd, port=port, name="agentflow sim", startup_timeout_s=60):
        report = asyncio.run(run_fleet(f"http://127.0.0.1:{port}"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps(report, indent=2) + "\n")
    figures = write_report([report], out / "report.html", title="agentflow: 24 coding agents")
    f, server = report["fleet"], report["server"]
    print(f"{f['turns']} turns, {f['output_tokens']:,} output tokens, {f['output_tps']:,.0f} tok/s")
    for row in server["comparison"]:
        if row["figure"] in ("output_tokens", "prompt_tokens", "cached_tokens"):
            print(f"  {row['figure']:14} client {row['client']:>9,} server {row['server']:>11,.0f}")
    print(f"{len(figures)} figures: {out / 'report.html'}")


if __name__ == "__main__":
    main()
