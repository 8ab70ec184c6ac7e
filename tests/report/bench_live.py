"""What the live view costs the fleet (a script, not a test).

    python -m tests.report.bench_live

Prints, for fleets of 64, 1,000 and 10,000 agents:

- the CPU time of ``LiveView.__call__`` per event (turn ends, and token events, which it
  ignores), median of 5 runs;
- the CPU time of one redraw (``render()`` and writing it to a terminal-like console);
- how late the event loop runs while rich's refresh thread redraws 4 times a second, as
  a :class:`~agentflow.report.LoopLagProbe` sees it (p99 and max over 5 s), against the
  same loop without the view.

The figures in ``docs/report.md`` come from here.
"""

from __future__ import annotations

import asyncio
import gc
import io
import statistics
import time
from typing import Any

from rich.console import Console

from agentflow import TokenEvent, TurnEndEvent
from agentflow.report import LiveView, LoopLagProbe
from tests.stats.traces import trace, turn_end


def events(n: int, agents: int) -> list[TurnEndEvent]:
    """``n`` turn ends spread over ``agents`` agents (20 output chunks each)."""
    out = []
    for i in range(n):
        ch = [10.0 + 8 * k + (i % 7) for k in range(20)]
        tr = trace(
            sent_ms=0, chunks_ms=ch, end_ms=ch[-1] + 1, completion=20, prompt=4000, cached=3000
        )
        out.append(turn_end(f"agent-{i % agents:05d}", f"s{i % agents}", i // agents, tr, 0))
    return out


def _console() -> Console:
    return Console(file=io.StringIO(), width=140, force_terminal=True, color_system="truecolor")


def per_event_us(evs: list[Any], agents: int) -> float:
    """Median over 5 runs of CPU µs per event."""
    runs = []
    for _ in range(5):
        view = LiveView(total_sessions=agents, console=_console())
        gc.collect()
        t0 = time.process_time_ns()
        for e in evs:
            view(e)
        runs.append((time.process_time_ns() - t0) / len(evs) / 1e3)
    return statistics.median(runs)


def redraw_ms(agents: int) -> float:
    """Median CPU ms of one render + print, with every agent having finished a turn."""
    view = LiveView(total_sessions=agents, console=_console())
    for e in events(agents, agents):
        view(e)
    runs = []
    for _ in range(20):
        t0 = time.process_time_ns()
        view.console.print(view.render())
        runs.append((time.process_time_ns() - t0) / 1e6)
    return statistics.median(runs)


async def _lag(view: LiveView | None, seconds: float) -> tuple[float, float]:
    probe = LoopLagProbe(interval_s=0.001)

    async def work() -> None:  # a loop that is busy but never blocks: ~20 µs callbacks
        while True:
            sum(range(300))
            await asyncio.sleep(0)

    task = asyncio.create_task(work())
    async with probe:
        if view is None:
            await asyncio.sleep(seconds)
        else:
            with view.live():
                await asyncio.sleep(seconds)
    task.cancel()
    s = probe.summary()
    return s["p99_s"] * 1e3, s["max_s"] * 1e3


def loop_lag(agents: int, seconds: float = 5.0) -> tuple[tuple[float, float], tuple[float, float]]:
    """(p99, max) loop lag in ms without and with the view refreshing 4×/s."""
    view = LiveView(total_sessions=agents, console=_console(), refresh_per_second=4)
    for e in events(agents, agents):
        view(e)
    return asyncio.run(_lag(None, seconds)), asyncio.run(_lag(view, seconds))


def main() -> None:
    tok = TokenEvent(agent="a", session_id="s", turn=0, kind="content", text="x", t_ns=0)
    print(f"token event: {per_event_us([tok] * 200_000, 1):.3f} µs")
    for agents in (64, 1000, 10_000):
        turn = per_event_us(events(50_000, agents), agents)
        draw = redraw_ms(agents)
        (p99_0, max_0), (p99_1, max_1) = loop_lag(agents)
        print(
            f"{agents:>6} agents: turn end {turn:.2f} µs · redraw {draw:.2f} ms "
            f"({draw * 4 / 10:.2f} % of a core at 4/s) · loop lag p99/max without view "
            f"{p99_0:.2f}/{max_0:.2f} ms, with {p99_1:.2f}/{max_1:.2f} ms"
        )


if __name__ == "__main__":
    main()
