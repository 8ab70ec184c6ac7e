"""Cost of the stats callbacks on the hot path, and memory per agent (a script, not a test).

    python -m tests.stats.bench_stats

Prints the CPU time per event of each callback (median of 5 runs) for turns of 20 and 200
output chunks, and the memory FleetStats holds per agent with 10,000 agents. The figures
in ``docs/stats.md`` come from here.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from agentflow import TokenEvent, TurnEndEvent
from agentflow.stats import SLO, FleetStats, PrometheusExporter, TurnCSVWriter
from tests.stats.traces import trace, turn_end


def events(n: int, chunks: int, agents: int = 1000) -> list[TurnEndEvent]:
    """``n`` turn ends over ``agents`` agents, each with ``chunks`` output chunks 8 ms apart."""
    out = []
    for i in range(n):
        sent = i * 10.0
        ch = [sent + 150 + 8 * k + (k % 3) for k in range(chunks)]
        tr = trace(
            sent_ms=sent,
            chunks_ms=ch,
            end_ms=ch[-1] + 1,
            completion=chunks,
            prompt=2000 + i % 5000,
            cached=1500,
        )
        a = i % agents
        out.append(turn_end(f"agent-{a:05d}", f"agent-{a:05d}-s", i // agents, tr, sent - 20))
    return out


def per_event_us(make: Callable[[], Callable[[Any], None]], evs: list[Any]) -> float:
    """Median over 5 runs of the CPU time per event, microseconds."""
    runs = []
    for _ in range(5):
        cb = make()
        gc.collect()
        t0 = time.process_time_ns()
        for e in evs:
            cb(e)
        runs.append((time.process_time_ns() - t0) / len(evs) / 1e3)
    return statistics.median(runs)


def memory_per_agent(n_agents: int, turns: int) -> float:
    """Bytes FleetStats holds per agent after ``turns`` turns of each of ``n_agents``."""
    evs = events(n_agents * turns, 20, agents=n_agents)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    stats = FleetStats(slos=[SLO(ttft_s=2.0, tpot_s=0.01)])
    for e in evs:
        stats(e)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used / n_agents


def main() -> None:
    """Print the table."""
    slos = [SLO(ttft_s=2.0, tpot_s=0.010), SLO(e2e_s=30.0)]
    for chunks in (20, 200):
        evs = events(20_000 if chunks == 20 else 5_000, chunks)
        rows: list[tuple[str, Callable[[], Callable[[Any], None]]]] = [
            ("FleetStats()", lambda: FleetStats()),
            ("FleetStats(slos=2)", lambda: FleetStats(slos=slos)),
            ("FleetStats(itl=False)", lambda: FleetStats(itl=False)),
            ("FleetStats(keep_samples)", lambda: FleetStats(keep_samples=True)),
            ("PrometheusExporter()", lambda: PrometheusExporter()),
            ("TurnCSVWriter(/dev/null)", lambda: TurnCSVWriter("/dev/null")),
        ]
        for name, make in rows:
            print(f"{chunks:4d} chunks  {name:26s} {per_event_us(make, evs):7.1f} µs / turn end")
    tok = [
        TokenEvent(agent="a", session_id="s", turn=0, kind="content", text="x", t_ns=i)
        for i in range(200_000)
    ]
    print(f"token event  FleetStats()               {per_event_us(FleetStats, tok) * 1e3:7.0f} ns")
    for agents, turns in ((10_000, 1), (10_000, 10)):
        per = memory_per_agent(agents, turns)
        print(f"memory: {agents} agents × {turns} turns: {per:,.0f} B / agent")


if __name__ == "__main__":
    main()
