"""A load sweep with sub-agents on the embedded simulator, in virtual time.

An orchestrator agent forks three sub-agents after its first turn (fan-out), waits for
their answers (fan-in) and carries on; every session shares a 1,000-token prefix. Sessions
arrive open-loop (Poisson) at a growing rate until the server — the small ``cpu-tiny``
profile, 8 sequences at once — is over-saturated. The table shows, per level, what each
agent got (decode tok/s) against what the server gave everyone (output tok/s), and the
knee; the sub-agents' prompts hit the parent's prefix in the server's cache.

python examples/bench_sweep.py
"""

from __future__ import annotations

from rich.console import Console

from agentflow.bench import (
    BenchConfig,
    FanOut,
    SessionTemplate,
    SimTarget,
    Sweep,
    Workload,
    run_bench,
)
from agentflow.bench.cli import bench_table
from agentflow.stats import SLO

WORKLOAD = Workload(
    name="orchestrators",
    shared_prefix_tokens=1000,
    templates=(
        SessionTemplate(
            name="orchestrator",
            turns=3,
            prompt_tokens=48,
            output_tokens=60,
            tool_latency_s=0.3,
            fanout=FanOut(template="subagent", width=3),
        ),
        SessionTemplate(name="subagent", weight=0, turns=1, prompt_tokens=32, output_tokens=40),
    ),
)


def main() -> None:
    config = BenchConfig(
        workload=WORKLOAD,
        sweep=Sweep(start=1.0, factor=2.0, max_levels=6),
        duration_s=30.0,
        warmup_s=3.0,
        slos=(SLO(ttft_s=0.25),),
    )
    report = run_bench(config, SimTarget(profile="cpu-tiny"))
    Console(width=200).print(bench_table(report))
    knee = report["knee"]
    print(f"knee: {knee['label'] if knee else 'none'}; stopped: {report['stopped']}")
    first = report["levels"][0]
    print(
        f"at {first['load']['label']}: {first['sessions']['subagents']} sub-agents, "
        f"prefix-cache hit rate {first['cache_hit_rate']:.0%} (server-reported)"
    )


if __name__ == "__main__":
    main()
