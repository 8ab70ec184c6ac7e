"""The lengths, errors/retries and session-timeline figures, from the demo's workload on
the simulator in virtual time: what they draw adds up to what the report measured."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from agentflow.report import Run, make_figures
from agentflow.report._fig_run import _spans, lengths, tool_durations
from tests.report.runs import virtual_report


def test_timeline_spans_add_up_to_the_measured_turns() -> None:
    report = virtual_report(8, concurrency=3, server=False)
    samples = report["samples"]
    by_session: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_session.setdefault(s["session_id"], []).append(s)
    assert len(by_session) == 8
    queued_somewhere = False
    for rows in by_session.values():
        queue, model, tools = _spans(rows)
        # queue = Σ queue wait, model = Σ (sent → end) = Σ E2E, to the nanosecond's rounding
        assert math.isclose(sum(n for _, n in queue) * 1e-9,
                            sum(r["queue_wait_s"] for r in rows), abs_tol=1e-6)  # fmt: skip
        assert math.isclose(sum(n for _, n in model) * 1e-9,
                            sum(r["e2e_s"] for r in rows), abs_tol=1e-6)  # fmt: skip
        # tools: from the end of each turn that called tools to the next turn's ready
        # (in virtual time in-memory tools take no time: then there is no span)
        ordered = sorted(rows, key=lambda r: r["turn"])
        gaps = [
            b["ready_ns"] - a["end_ns"] for a, b in itertools.pairwise(ordered) if a["tool_calls"]
        ]
        assert [n for _, n in tools] == [g for g in gaps if g > 0]
        queued_somewhere |= bool(queue)
    assert queued_somewhere  # 8 agents through 3 slots waited


def test_the_figures_with_and_without_samples() -> None:
    full = {f.key: f for f in make_figures([virtual_report(6, concurrency=2, server=False)])}
    timeline = full["session_timeline"].caption
    assert "6 of 6 sessions" in timeline and "queue wait" in timeline
    assert "Histograms of every turn" in full["lengths"].caption
    assert "0 retries, 0 errors" in full["errors_retries"].caption

    thin = {f.key: f for f in make_figures([virtual_report(4, samples=False, server=False)])}
    assert "Needs each turn kept" in thin["session_timeline"].caption
    assert "CDFs from the report's sketches" in thin["lengths"].caption


def test_a_timeline_of_one_session_and_a_malformed_turn() -> None:
    """max_sessions=1 of several sessions divided by zero; a sample whose turn is not a
    number (a hand-edited report) raised where other bad fields are skipped."""
    from agentflow._errors import ConfigError
    from agentflow.report._fig_sessions import session_timeline

    report = virtual_report(3, server=False)
    assert "1 of 3 sessions" in session_timeline([Run("r", report)], max_sessions=1).caption
    report["samples"][0]["turn"] = "x"
    assert "3 of 3 sessions" in session_timeline([Run("r", report)]).caption
    with pytest.raises(ConfigError, match="max_sessions"):
        session_timeline([Run("r", report)], max_sessions=0)


def test_a_report_from_before_the_new_fields_still_draws() -> None:
    """A report written without throughput.errors/retries and fleet.total_tps."""
    report = virtual_report(3, samples=False, server=False)
    del report["throughput"]["errors"], report["throughput"]["retries"]
    del report["fleet"]["total_tps"]
    figures = {f.key: f for f in make_figures([Run("old", report)])}
    assert figures["errors_retries"].png.startswith(b"\x89PNG")


def test_per_agent_figures_use_the_reports_nearest_rank_quantiles() -> None:
    """Ten agents decoding at 10, 20, … 100 tok/s: the comparison figure's p50 and p90 are
    the report's own (50, 90), not the 6th and the 10th value."""
    from agentflow.report._fig_compare import _agent_q
    from agentflow.stats import FleetStats
    from tests.stats.traces import trace, turn_end

    stats = FleetStats(per="session")
    for k in range(10):
        gap = 1000.0 / (10 * (k + 1))
        t = trace(sent_ms=0, chunks_ms=[10, 10 + gap], end_ms=10 + gap, completion=2)
        stats(turn_end("a", f"s{k}", 0, t, ready_ms=0))
    report = stats.report()
    per_agent = report["per_agent"]["decode_tps"]
    run = Run("r", report)
    assert _agent_q(run, 0.5) == pytest.approx(per_agent["p50"]) == pytest.approx(50.0)
    assert _agent_q(run, 0.9) == pytest.approx(per_agent["p90"]) == pytest.approx(90.0)


def test_turns_without_output_are_in_the_length_histogram(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Turns of 0 output tokens (a stream that ended without output) fell left of every
    bin: the 'turns' histogram silently lost them. Linear bins now start at 0; log bins
    cannot, so the caption counts those turns."""
    from matplotlib.axes import Axes

    drawn: list[int] = []
    real_hist = Axes.hist

    def counting_hist(self: Axes, x: Any, *args: Any, **kw: Any) -> Any:
        n, bins, patches = real_hist(self, x, *args, **kw)
        drawn.append(int(sum(n)))
        return n, bins, patches

    monkeypatch.setattr(Axes, "hist", counting_hist)
    report = virtual_report(6, concurrency=2, server=False)
    samples = report["samples"]
    for k, s in enumerate(samples):  # 0–9 tokens, every tenth turn none: linear bins
        s["output_tokens"] = k % 10
    figure = lengths([Run("r", report)])
    assert drawn[1] == len(samples) and "not on the log axis" not in figure.caption

    drawn.clear()
    for k, s in enumerate(samples):  # 0, or 1 to 260 tokens: log bins
        s["output_tokens"] = 0 if k < 3 else 1 if k == 3 else 10 * k
    figure = lengths([Run("r", report)])
    assert drawn[1] == len(samples) - 3
    assert "3 turns with 0 output tokens are not on the log axis." in figure.caption


def test_tool_calls_of_0_seconds_are_said_to_be_drawn_at_the_floor() -> None:
    """In virtual time in-memory tools take 0 s; the log axis draws them at 1 µs, and the
    caption says so (it did not: a reader saw calls of 1 µs)."""
    report = virtual_report(4, samples=False, server=False)
    assert report["tools"] and all(t["duration_s"]["max"] == 0 for t in report["tools"].values())
    n = len(report["tools"])
    caption = tool_durations([Run("r", report)]).caption
    assert f"On {n} of the rows, durations under 1 µs (0 s:" in caption
    report["tools"] = {
        name: {**t, "duration_s": {**t["duration_s"], "p50": 0.01, "p99": 0.02, "max": 0.03}}
        for name, t in report["tools"].items()
    }
    assert "under 1 µs" not in tool_durations([Run("r", report)]).caption
