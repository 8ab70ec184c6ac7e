"""The live view's totals and what it draws; the loop-lag probe's arithmetic."""

from __future__ import annotations

import asyncio
import io
import logging

import pytest
from rich.console import Console

from agentflow import ErrorEvent, RetryEvent, TokenEvent, TurnEndEvent
from agentflow._errors import ServerError
from agentflow.embedded import VirtualTimeLoop, run_virtual
from agentflow.report import LiveView, LoopLagProbe
from agentflow.report._live import _Row
from agentflow.sched._runner import FailedAttempt
from tests.stats.traces import session_end, trace, turn_end


def _turn(
    agent: str, tpot_ms: float, *, prompt: int = 1000, cached: int | None = 500
) -> TurnEndEvent:
    """A turn of 11 output tokens: first at 50 ms, then one every ``tpot_ms``."""
    chunks = [50 + tpot_ms * k for k in range(11)]
    tr = trace(
        sent_ms=0, chunks_ms=chunks, end_ms=chunks[-1], completion=11, prompt=prompt, cached=cached
    )
    return turn_end(agent, f"{agent}-s", 0, tr, ready_ms=0)


def _view(**kw: object) -> tuple[LiveView, io.StringIO]:
    out = io.StringIO()
    clock = iter(float(t) for t in range(1000))
    view = LiveView(
        total_sessions=5,
        console=Console(file=out, width=160, color_system=None),
        clock=lambda: next(clock),
        **kw,  # type: ignore[arg-type]
    )
    return view, out


def test_totals_and_the_slowest_and_fastest_agents() -> None:
    view, out = _view(top=1)
    for name, tpot in (("slow", 40.0), ("mid", 20.0), ("fast", 5.0)):
        view(_turn(name, tpot))
    view(TokenEvent(agent="x", session_id="x", turn=0, kind="content", text="hi", t_ns=0))
    view(session_end("slow", "slow-s"))
    view(session_end("mid", "mid-s", status="error"))
    err = ServerError("boom", status=500, body=None, endpoint="http://x")
    view(ErrorEvent(agent="mid", session_id="mid-s", turn=1, where="session", error=err))
    attempt = FailedAttempt(attempt=0, replica="r0", error=err, trace=None, wait_s=0.1)
    view(RetryEvent(agent="fast", session_id="fast-s", turn=0, attempt=attempt))
    snap = view.snapshot()
    assert snap == {
        "sessions_done": 2,
        "sessions_failed": 1,
        "turns": 3,
        "output_tokens": 33,
        "cache_hit_rate": 0.5,
        "errors": {"session": 1},
        "retries": 1,
    }
    slow, fast = view.ranked()
    assert [n for n, _ in slow] == ["slow"] and [n for n, _ in fast] == ["fast"]
    assert slow[0][1].decode_tps == 1000 / 40 and fast[0][1].decode_tps == 1000 / 5
    view.console.print(view.render())
    text = out.getvalue()
    assert "sessions 2/5" in text and "failed 1" in text
    assert "errors 1 · retries 1" in text and "cache hit 50.0%" in text
    assert "last error: mid: ServerError" in text and "last retry: fast: ServerError" in text
    assert "slow" in text and "fast" in text and "mid" not in text.split("fastest")[1]


def test_token_events_cost_nothing_and_change_nothing() -> None:
    view, _ = _view()
    before = view.snapshot()
    for i in range(100):
        view(TokenEvent(agent="a", session_id="s", turn=0, kind="content", text="x", t_ns=i))
    assert view.snapshot() == before and view.agents == {}


def test_fleet_rate_is_over_the_recent_window() -> None:
    view, _ = _view()  # the clock ticks 1 s per read; started at 0
    assert view.fleet_tps() == 0.0  # at t=1
    view(_turn("a", 10.0))  # 11 tokens
    assert view.fleet_tps() == 11.0  # t=2: 11 tokens over the 1 s since t=1
    for _ in range(10):
        view.fleet_tps()  # t=3..12, nothing new
    assert view.fleet_tps() == 0.0  # t=13: the window holds no new token


def test_cache_hit_not_reported_and_a_time_scaled_speed() -> None:
    view, out = _view(time_scale=4.0)
    view(_turn("a", 10.0, cached=None))
    view.console.print(view.render())
    text = out.getvalue()
    assert "cache hit not reported" in text
    assert "100 (×4 = 400)" in text  # 1/10 ms = 100 tok/s, shown scaled back too
    assert view.snapshot()["cache_hit_rate"] is None


def test_loop_lag_probe_measures_one_loop_iteration() -> None:
    """On virtual time, with a busy callback that holds the loop 1 ms per iteration,
    every sample is exactly one iteration: 1 ms (its timers, late by up to that iteration,
    stay within the 1 ms of timer rounding the probe does not count)."""

    async def main() -> LoopLagProbe:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        running = True

        def busy() -> None:
            loop._advance(0.001)
            if running:
                loop.call_soon(busy)

        probe = LoopLagProbe(interval_s=0.001, clock=loop.clock_ns)
        loop.call_soon(busy)
        async with probe:
            await asyncio.sleep(0.1)
        running = False
        return probe

    probe = run_virtual(main)
    s = probe.summary()
    assert s["count"] >= 20
    assert s["max_s"] == 0.001 and s["p50_s"] == 0.001 and s["mean_s"] == 0.001
    assert probe.take_window_max() == 0.001 and probe.take_window_max() == 0.0


def test_ranking_reads_a_copy_of_the_rows_while_the_loop_adds_agents() -> None:
    """rich redraws on its own thread while the loop's thread adds rows. A row whose
    speed, when read, adds an agent (what the loop thread does between two bytecodes of
    the redraw) must not break the ranking: it ranks the rows as they were."""
    view, _ = _view(top=1)
    view(_turn("a", 10.0))
    view(_turn("b", 20.0))

    class Intruding(_Row):
        __slots__ = ()

        @property
        def decode_s(self) -> float:
            view(_turn(f"new{len(view.agents)}", 5.0))
            return 1.0

        @decode_s.setter
        def decode_s(self, value: float) -> None:
            pass

    row = Intruding()
    row.decode_tokens = 500  # 500 tok/s: the fastest
    view.agents["c"] = row
    slow, fast = view.ranked()
    assert [n for n, _ in slow] == ["b"] and [n for n, _ in fast] == ["c"]
    assert len(view.agents) > 3


def test_a_failing_redraw_is_logged_and_does_not_end_the_live_view(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """rich's refresh thread has no ``try``: an error from the renderable would end it,
    freezing the view. The live view's renderable logs the error and keeps the last view."""

    class BrokenFleet:
        broken = False

        @property
        def in_flight(self) -> int:
            if self.broken:
                raise RuntimeError("dictionary changed size during iteration")
            return 3

        queued = 1

    fleet = BrokenFleet()
    view, out = _view(fleet=fleet)
    view(_turn("a", 10.0))
    live = view.live()
    good = live.get_renderable()
    fleet.broken = True
    with caplog.at_level(logging.ERROR, logger="agentflow.report"):
        assert live.get_renderable() is good
    assert "redraw 1 failed" in caplog.text and "dictionary changed size" in caplog.text
    fleet.broken = False
    view.console.print(live.get_renderable())
    assert "in flight 3" in out.getvalue()


def test_retries_before_an_agents_first_turn_count_in_its_row() -> None:
    """A retry came before the agent had a row (its first turn was the one retried) and
    was dropped from the row: the table said 'retries 0' while the fleet counted them."""
    view, out = _view(top=1)
    err = ServerError("busy", status=503, body=None, endpoint="http://x")
    attempt = FailedAttempt(attempt=0, replica="r0", error=err, trace=None, wait_s=0.1)
    for _ in range(3):
        view(RetryEvent(agent="a", session_id="a-s", turn=0, attempt=attempt))
    view(_turn("a", 10.0))
    assert view.retries == 3 and view.agents["a"].retries == 3
    view.console.print(view.render())
    row = out.getvalue().splitlines()[-1]
    assert row.split()[:2] == ["slow", "a"] and row.split()[-2:] == ["3", "running"]
