"""Reports to draw, made deterministically: the demo's workload on the in-process simulator
under virtual time, with the server's /metrics rendered in-process before, during and after.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentflow import Fleet
from agentflow.demo.workload import make_workload
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.report import GaugeSample, parse_metrics, server_section
from agentflow.report._dialects import DIALECTS, MEAN_GAUGES
from agentflow.report._prom import quick_values
from agentflow.report._server import sample_names
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver
from agentflow.sim.metrics import SimMetrics
from agentflow.stats import FleetStats


def virtual_report(
    agents: int,
    *,
    concurrency: int | None = None,
    seed: int = 0,
    samples: bool = True,
    server: bool = True,
    label: str | None = None,
) -> dict[str, Any]:
    """An ``agentflow.report/2`` report of ``agents`` coding agents on the simulator, with a
    ``server`` section from its /metrics (rendered in-process every 50 ms of virtual time)."""

    async def main() -> dict[str, Any]:
        driver = EngineDriver(Engine("deepseek-v4.1-flash-gb300", seed=seed))
        metrics = SimMetrics(driver.model)
        driver.add_finish_hook(metrics.observe)

        def page() -> str:
            return metrics.render(driver.engine.stats(), driver.stats())

        transport = SimTransport(driver)
        workload = make_workload(agents, model="m", seed=seed, turns=(2, 6), max_tokens=64)
        stats = FleetStats(per="session", keep_samples=samples, bucket_s=0.02, start_ns=0)
        before = parse_metrics(page(), t_ns=loop_clock())
        names = sample_names(before, DIALECTS["vllm"])
        flat = [n for ns in names.values() for n in ns]
        means = [n for k, ns in names.items() if k in MEAN_GAUGES for n in ns]
        gauge_samples: list[GaugeSample] = []

        async def sample() -> None:
            while True:
                await asyncio.sleep(0.05)
                raw = quick_values(page(), flat, means)
                values = {k: sum(raw[n] for n in ns) for k, ns in names.items()}
                gauge_samples.append(GaugeSample(loop_clock(), values))

        sampler = asyncio.create_task(sample())
        fleet = Fleet(
            transport, max_concurrency=concurrency or agents, callbacks=[stats], clock=loop_clock
        )
        await fleet.run(a.session(t) for a, t in zip(workload.agents, workload.tasks, strict=True))
        sampler.cancel()
        after = parse_metrics(page(), t_ns=loop_clock())
        await transport.aclose()
        run = {"label": label or f"{agents} agents", "agents": agents, "time_scale": 1.0}
        report = stats.report(run=run, include_samples=samples)
        if server:
            report["server"] = server_section(
                before, after, samples=gauge_samples, client=report, url="in-process", origin_ns=0
            )
        return report

    return run_virtual(main())
