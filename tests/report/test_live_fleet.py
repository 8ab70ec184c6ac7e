"""The live view driven by a real fleet on the embedded simulator, in virtual time.

Every figure the view draws — in flight, queued, turns done of planned, the rolling
TTFT/TPOT — is checked against what the fleet and its result say at the same virtual
instant; nothing here reads the wall clock.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from agentflow import Event, Fleet, FleetResult, TurnEndEvent
from agentflow.demo.workload import make_workload
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.report import LiveView
from agentflow.report._live import ROLLING_WINDOW_S
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver
from agentflow.stats import nearest_rank
from tests.report.test_live import _turn

AGENTS, CONCURRENCY = 6, 2


def _text(view: LiveView) -> str:
    console = Console(file=io.StringIO(), record=True, width=140, color_system=None)
    console.print(view.render())
    return console.export_text()


async def _run() -> tuple[LiveView, FleetResult, list[dict[str, Any]], int]:
    loop = asyncio.get_running_loop()
    workload = make_workload(AGENTS, model="agentflow-sim", seed=3, turns=(2, 4), max_tokens=48)
    planned = sum(r + 1 for r in workload.tool_rounds)
    view = LiveView(total_sessions=AGENTS, total_turns=planned, clock=loop.time)
    transport = SimTransport(EngineDriver(Engine("deepseek-v4.1-flash-gb300", seed=3)))
    fleet = Fleet(transport, max_concurrency=CONCURRENCY, callbacks=[view], clock=loop_clock)
    view.fleet = fleet
    seen: list[dict[str, Any]] = []

    def snap(event: Event) -> None:  # after the view has folded the event in
        if isinstance(event, TurnEndEvent):
            seen.append(
                {
                    "text": _text(view),
                    "in_flight": fleet.in_flight,
                    "queued": fleet.queued,
                    "turns": view.turns,
                }
            )

    fleet.subscribe(snap)
    sessions = [a.session(t) for a, t in zip(workload.agents, workload.tasks, strict=True)]
    try:
        result = await fleet.run(sessions)
    finally:
        await transport.aclose()
    return view, result, seen, planned


def test_live_view_counts_a_real_fleet_in_virtual_time() -> None:
    view, result, seen, planned = run_virtual(_run())
    turns = [t for s in result.sessions for t in s.turns]
    assert len(turns) == planned and all(s.ok for s in result.sessions)
    # At every turn end: the counts the fleet had at that instant, turns done of planned.
    for s in seen:
        assert f"in flight {s['in_flight']} · queued {s['queued']}" in s["text"]
        assert f"turns {s['turns']}/{planned}" in s["text"]
        assert s["in_flight"] <= CONCURRENCY
    # Six agents through two slots: turns did wait for one.
    assert max(s["queued"] for s in seen) > 0
    assert seen[0]["turns"] == 1 and seen[-1]["turns"] == planned
    # At the end: every session and turn done, nothing in flight or queued.
    text = _text(view)
    assert f"sessions {AGENTS}/{AGENTS}" in text and f"turns {planned}/{planned}" in text
    assert "in flight 0 · queued 0 · tools running 0" in text
    # The rolling TTFT/TPOT: the run is shorter than the window, so it holds every turn.
    assert result.wall_s < ROLLING_WINDOW_S
    ttft = sorted(t.metrics.ttft_s for t in turns if t.metrics.ttft_s is not None)
    tpot = sorted(t.metrics.tpot_s for t in turns if t.metrics.tpot_s is not None)
    rolling = view.rolling()
    assert rolling["turns"] == planned
    assert rolling["ttft_p50_s"] == ttft[nearest_rank(0.5, len(ttft))]
    assert rolling["tpot_p90_s"] == tpot[nearest_rank(0.9, len(tpot))]
    p50 = f"TTFT p50 {rolling['ttft_p50_s'] * 1e3:,.1f} ms"
    tp50 = f"TPOT p50 {rolling['tpot_p50_s'] * 1e3:,.1f} ms"
    assert f"last {ROLLING_WINDOW_S:g} s ({planned} turns)" in text and p50 in text and tp50 in text


def test_rolling_latency_forgets_turns_older_than_the_window() -> None:
    """The view's clock, not the wall's: a turn seen before a redraw that is older than
    the window drops out of the rolling figures."""
    now = [0.0]
    view = LiveView(total_sessions=1, clock=lambda: now[0])
    assert view.rolling()["turns"] == 0 and view.rolling()["ttft_p50_s"] is None
    view(_turn("old", 40.0))  # first token at 50 ms
    now[0] = 1.0
    assert view.rolling()["turns"] == 1
    now[0] = ROLLING_WINDOW_S + 2
    view(_turn("new", 10.0))
    r = view.rolling()
    assert r["turns"] == 1 and r["tpot_p50_s"] == pytest.approx(0.010) == r["tpot_p90_s"]
    text = _text(view)
    assert "(1 turns): TTFT p50 50.0 ms p90 50.0 ms · TPOT p50 10.0 ms" in text
    assert "turns 2" in text and "turns 2/" not in text  # no planned total: a count
