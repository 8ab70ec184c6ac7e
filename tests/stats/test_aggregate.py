"""FleetStats on four hand-built turns: every aggregate against a value worked out by hand.

The run (``traces.fixed_run``), times in ms:

    a/T0  ready 0     sent 0     chunks 50 60 80 120   end 130   5 out, prompt 1000, cached 0
    b/T0  ready 0     sent 500   chunks 900 1000       end 1100  no usage: 2 chunks counted
    a/T1  ready 1000  sent 1100  chunks 1300 1310 1320 end 1330  3 out, prompt 1200, cached 1000
    b/T1  ready 2000  sent 2000  no output             end 2050  0 out, prompt 1500

Per turn: TTFT 50, 400, 200, — ms; E2E 130, 600, 230, 50 ms; TPOT 80/4 = 20, 200/1 = 200,
30/2 = 15 ms, —; decode 50, 5, 66.67 tok/s; ITL 10 20 40 | 100 | 10 10 ms; queue 0, 500,
100, 0 ms. Quantiles are nearest-rank: p50 of n values is the ⌈n/2⌉-th smallest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from agentflow import ConfigError, FleetEndEvent, FleetResult, FleetStartEvent, PromptInfo
from agentflow._seconds import shown
from agentflow.stats import SLO, FleetStats, exact_distribution, nearest_rank
from tests.stats.test_report_schema import validate
from tests.stats.traces import MS, fixed_run, session_end, trace, turn_end

ALPHA = 0.01


def near(got: float | None, want: float, alpha: float = ALPHA) -> bool:
    """Within the sketch's relative accuracy (and float rounding)."""
    return got is not None and abs(got - want) <= alpha * abs(want) + 1e-12


def stats_of_fixed_run(**options: object) -> FleetStats:
    stats = FleetStats(
        slos=[SLO(ttft_s=0.1, tpot_s=0.03), SLO(e2e_s=0.25, name="fast")],
        start_ns=0,
        **options,  # type: ignore[arg-type]
    )
    for event in fixed_run():
        stats(event)
    stats(session_end("a", "a-1"))
    stats(session_end("b", "b-1", "max_turns"))
    return stats


def test_nearest_rank() -> None:
    """p50 of 4 is the 2nd smallest, p90 of 3 the largest, p0 the smallest."""
    assert nearest_rank(0.5, 4) == 1
    assert nearest_rank(0.9, 3) == 2
    assert nearest_rank(0.0, 5) == 0
    assert nearest_rank(0.07, 100) == 6  # 0.07 · 100 is 7.000000000000001 in floats
    d = exact_distribution([0.2, 0.05, 0.4], [0.5, 0.9])
    assert d == {"count": 3, "mean": pytest.approx(0.65 / 3), "min": 0.05, "max": 0.4,
                 "p50": 0.2, "p90": 0.4}  # fmt: skip


def test_per_turn_distributions() -> None:
    """Counts, means and extremes exact; quantiles within α of the hand-sorted values."""
    s = stats_of_fixed_run()
    sk = s.sketches
    ttft = sk["ttft_s"]
    assert ttft.count == 3 and ttft.min == 0.05 and ttft.max == 0.4
    assert ttft.mean == pytest.approx((0.05 + 0.4 + 0.2) / 3)
    assert near(ttft.quantile(0.5), 0.2) and near(ttft.quantile(0.9), 0.4)
    e2e = sk["e2e_s"]  # sorted 50 130 230 600 ms
    assert e2e.count == 4 and near(e2e.quantile(0.5), 0.13) and near(e2e.quantile(0.99), 0.6)
    tpot = sk["tpot_s"]  # sorted 15 20 200 ms
    assert tpot.count == 3 and near(tpot.quantile(0.5), 0.02)
    decode = sk["decode_tps"]  # sorted 5 50 66.7
    assert near(decode.quantile(0.5), 50.0) and near(decode.quantile(0.9), 200 / 3)
    itl = sk["itl_s"]  # sorted 10 10 10 20 40 100 ms
    assert itl.count == 6 and near(itl.quantile(0.5), 0.01) and near(itl.quantile(0.9), 0.1)
    queue = sk["queue_wait_s"]  # sorted 0 0 100 500 ms: zeros are exact
    assert queue.quantile(0.5) == 0.0 and near(queue.quantile(0.75), 0.1)
    assert near(queue.quantile(0.9), 0.5)
    ctx = sk["context_tokens"]  # b/T0 reported no prompt and had no estimate
    assert ctx.count == 3 and near(ctx.quantile(0.5), 1200)
    out = sk["output_tokens"]  # sorted 0 2 3 5
    assert out.count == 4 and out.sum == 10 and near(out.quantile(0.5), 2)


def test_fleet_totals_and_provenance() -> None:
    """Token totals, cache hit rate and where each count came from."""
    s = stats_of_fixed_run()
    r = s.report()
    f = r["fleet"]
    assert f["turns"] == 4 and f["no_output_turns"] == 1
    assert f["sessions"] == 2 and f["completed"] == 1 and f["failed"] == 1
    assert f["statuses"] == {"cancelled": 0, "completed": 1, "error": 0, "max_turns": 1}
    assert f["output_tokens"] == 10
    assert f["prompt_tokens"] == 3700
    assert f["cached_tokens"] == 1000
    assert f["cache_hit_rate"] == pytest.approx(1000 / 2200)  # turns that reported the cache
    assert f["wall_s"] is None and f["duration_s"] == pytest.approx(2.05)  # start → last end
    assert f["output_tps"] == pytest.approx(10 / 2.05)
    assert f["finish_reasons"] == {"none": 1, "stop": 2, "tool_calls": 1}
    p = r["provenance"]
    assert p["output_tokens"] == {
        "server_usage": {"turns": 3, "tokens": 8},
        "chunk_count": {"turns": 1, "tokens": 2},
    }
    assert p["tokens_per_chunk"] == {"exact_turns": 1, "inexact_turns": 3}
    assert p["prompt_tokens"] == {
        "reported_turns": 3,
        "reported_tokens": 3700,
        "estimated_turns": 0,
        "estimated_tokens": 0,
        "unknown_turns": 1,
    }
    assert p["cached_tokens"] == {
        "reported_turns": 2,
        "unreported_turns": 2,
        "sources": {"prompt_tokens_details": 2},
    }


def test_goodput() -> None:
    """TTFT ≤ 100 ms and TPOT ≤ 30 ms: only a/T0. E2E ≤ 250 ms: all but b/T0, so agent a."""
    r = stats_of_fixed_run().report()
    strict, fast = r["goodput"]
    assert strict["name"] == "ttft<=100ms,tpot<=30ms"
    assert strict["turns_met"] == 1 and strict["output_tokens_met"] == 5
    assert strict["turn_fraction"] == 0.25
    assert strict["turns_per_s"] == pytest.approx(1 / 2.05)
    assert strict["failed_bounds"] == {"ttft_s": 3, "tpot_s": 1}  # b/T1 has no TTFT: fails
    assert strict["agents_met"] == 0 and strict["agents"] == 2
    assert fast["name"] == "fast" and fast["bounds"] == {"e2e_s": 0.25}
    assert fast["turns_met"] == 3 and fast["output_tokens_met"] == 8
    assert fast["agents_met"] == 1 and fast["agent_fraction"] == 0.5
    assert fast["agents_per_s"] == pytest.approx(1 / 2.05)


def test_slo_edge_cases() -> None:
    """No output fails a TTFT bound; one output token passes a TPOT bound."""
    no_output, one_token = (
        turn_end("a", "s", 0, trace(sent_ms=0, chunks_ms=[], end_ms=10, completion=0), 0),
        turn_end("a", "s", 1, trace(sent_ms=0, chunks_ms=[5], end_ms=10, completion=1), 0),
    )
    assert not SLO(ttft_s=1).met_by(no_output.metrics)
    assert SLO(tpot_s=1e-9).met_by(one_token.metrics)
    assert SLO(itl_max_s=1e-9).met_by(one_token.metrics)  # one chunk: no gap
    assert SLO(ttft_s=1, e2e_s=0.005).failed_bounds(one_token.metrics) == ["e2e_s"]


def test_per_agent_rows() -> None:
    """Agent a: decode = (4 + 2) tokens / (80 + 30) ms; agent b's context is its last report."""
    r = stats_of_fixed_run().report()
    a, b = r["agents"]
    assert (a["agent"], a["turns"], a["output_tokens"]) == ("a", 2, 8)
    assert a["decode_tps"]["mean"] == pytest.approx(6 / 0.11)
    assert a["decode_tps"]["min"] == pytest.approx(50) and a["decode_tps"]["max"] == pytest.approx(
        200 / 3
    )
    assert a["ttft_s"] == {"mean": pytest.approx(0.125), "max": pytest.approx(0.2)}
    assert a["e2e_s"] == {"mean": pytest.approx(0.18), "max": pytest.approx(0.23)}
    assert a["queue_wait_s"]["mean"] == pytest.approx(0.05)
    assert a["prompt_tokens"] == 2200 and a["context_tokens"] == 1200
    assert a["cache_hit_rate"] == pytest.approx(1000 / 2200)
    assert a["first_s"] == 0 and a["last_s"] == pytest.approx(1.33)
    assert a["status"] == "completed" and a["session_id"] == "a-1"
    assert a["slo_turns_met"] == {"ttft<=100ms,tpot<=30ms": 1, "fast": 2}
    assert a["meets_slo"] == {"ttft<=100ms,tpot<=30ms": False, "fast": True}
    assert (b["turns"], b["output_tokens"], b["chunk_count_turns"]) == (2, 2, 1)
    assert b["decode_tps"]["mean"] == pytest.approx(5.0)
    assert b["context_tokens"] == 1500 and b["cached_tokens"] is None
    assert b["ttft_s"]["mean"] == pytest.approx(0.4)  # b/T1 had no output
    assert b["status"] == "max_turns"
    spread = r["per_agent"]
    assert spread["agents"] == 2
    assert spread["decode_tps"]["min"] == pytest.approx(5.0)
    assert spread["decode_tps"]["p50"] == pytest.approx(5.0)  # nearest rank of 2: the 1st
    assert spread["decode_tps"]["p90"] == pytest.approx(6 / 0.11)


def test_rows_per_session() -> None:
    """per='session' keys rows by session id; two sessions of one agent make two rows."""
    s = FleetStats(per="session")
    s(turn_end("x", "x-1", 0, trace(sent_ms=0, chunks_ms=[1], end_ms=2, completion=1), 0))
    s(turn_end("x", "x-2", 0, trace(sent_ms=0, chunks_ms=[1], end_ms=2, completion=1), 0))
    assert sorted(s.agents) == ["x-1", "x-2"]
    t = FleetStats(per="agent")
    t(turn_end("x", "x-1", 0, trace(sent_ms=0, chunks_ms=[1], end_ms=2, completion=1), 0))
    t(turn_end("x", "x-2", 0, trace(sent_ms=0, chunks_ms=[1], end_ms=2, completion=1), 0))
    assert list(t.agents) == ["x"] and t.agents["x"].turns == 2


def test_max_context_whatever_the_order() -> None:
    """A turn that ended before the row's latest one still counts toward its largest
    context (from_result and merges fold turns out of end order); the last is the latest."""
    small_late = turn_end("a", "s1", 0, trace(sent_ms=0, chunks_ms=[10], end_ms=500, prompt=100), 0)
    big_early = turn_end("a", "s2", 0, trace(sent_ms=0, chunks_ms=[10], end_ms=200, prompt=5000), 0)
    for order in ([small_late, big_early], [big_early, small_late]):
        s = FleetStats()
        for e in order:
            s(e)
        row = s.agents["a"]
        assert (row.max_context_tokens, row.context_tokens) == (5000, 100)


def test_throughput_over_time() -> None:
    """1 s buckets from 0: output tokens spread over each decode phase, prompt over prefill.

    Output: a/T0's 5 in [50, 130) → bucket 0; b/T0's 2 over [900, 1100) → 1 + 1;
    a/T1's 3 → bucket 1. Prompt: 1000 → 0, 1200 → 1, 1500 (no output: over the whole
    request [2000, 2050)) → 2. The last bucket covers 2000–2050 ms of the run only.
    """
    r = stats_of_fixed_run().report()
    t = r["throughput"]
    assert t["bucket_s"] == 1.0
    assert t["t_s"] == [0.0, 1.0, 2.0]
    assert t["dt_s"] == pytest.approx([1.0, 1.0, 0.05])
    assert t["output_tps"] == pytest.approx([6.0, 4.0, 0.0])
    assert t["prompt_tps"] == pytest.approx([1000.0, 1200.0, 1500 / 0.05])
    assert t["cached_tps"] == pytest.approx([0.0, 1000.0, 0.0])
    assert t["cache_hit_rate"] == [0.0, pytest.approx(1000 / 1200), None]
    # request-seconds in flight / bucket: (130 + 500) ms, (230 + 100) ms, 50 ms
    assert t["in_flight"] == pytest.approx([0.63, 0.33, 1.0])
    assert t["turns_per_s"] == pytest.approx([1.0, 2.0, 20.0])  # by end time
    assert t["decode_tps_mean"] == [50.0, pytest.approx((5 + 200 / 3) / 2), None]
    assert t["slo_turns_per_s"]["fast"] == pytest.approx([1.0, 1.0, 20.0])


def test_the_last_bucket_runs_to_the_last_turn() -> None:
    """The report's origin (start_ns) 0.35 s before the fleet started, the fleet's wall
    time from its own start: the run ends at its last turn (10.4 s), not at origin +
    wall time (10.05 s), so the last bucket's one request is 1 in flight, not 8."""
    s = FleetStats(start_ns=0, bucket_s=1.0)
    t = trace(sent_ms=500, chunks_ms=[600, 10_300], end_ms=10_400, completion=100)
    s(turn_end("a", "a-1", 0, t, ready_ms=500))
    s.wall_s = 10.05
    tp = s.report()["throughput"]
    assert tp["dt_s"][-1] == pytest.approx(0.4)
    assert tp["in_flight"][-3:] == pytest.approx([1.0, 1.0, 1.0])
    assert tp["output_tps"][-1] == pytest.approx(tp["output_tps"][-2])


def test_open_loop_arrival_the_last_bucket_ends_with_the_run() -> None:
    """The fleet starts at 0, its one turn becomes ready at 600 ms and streams 100 tokens
    evenly over [700, 1200) ms; the fleet ends at 1.2 s. The last bucket is 0.2 s long
    (40 tokens: 200 tok/s), not origin + wall time = 1.8 s past the first ready time."""
    tr = trace(
        sent_ms=600, chunks_ms=[700 + 5 * i for i in range(101)], end_ms=1200, completion=100
    )
    end = FleetEndEvent(result=FleetResult(sessions=[], wall_s=1.2, peak_in_flight=1))
    s = FleetStats(bucket_s=1.0)
    s(FleetStartEvent(sessions=1, start_ns=0))
    s(turn_end("a", "s", 0, tr, ready_ms=600))
    s(end)
    r = s.report()
    tp = r["throughput"]
    assert (tp["t_s"], tp["dt_s"]) == ([0.0, 1.0], [1.0, pytest.approx(0.2)])
    assert tp["output_tps"] == pytest.approx([60.0, 200.0])
    assert r["agents"][0]["first_s"] == pytest.approx(0.6)  # from the fleet's start
    # Fleet start unknown (a result, or no FleetStartEvent): the run ends at its last turn.
    unknown = FleetStats(bucket_s=1.0)
    unknown(turn_end("a", "s", 0, tr, ready_ms=600))
    unknown(end)
    tp = unknown.report()["throughput"]
    assert (tp["t_s"], tp["dt_s"]) == ([0.0, pytest.approx(0.4)], pytest.approx([0.4, 0.2]))
    assert tp["output_tps"] == pytest.approx([150.0, 200.0])


def test_output_without_an_output_chunk_is_in_the_series() -> None:
    """Usage says 512 output tokens but no chunk carried output (hidden reasoning that hit
    max_tokens): they are spread over the request, [40, 900) ms, so the series still
    integrates back to the fleet's output tokens."""
    s = FleetStats(start_ns=0, bucket_s=0.5)
    s(turn_end("a", "s", 0, trace(sent_ms=0, chunks_ms=[10, 20], end_ms=30, completion=2), 0))
    hidden = trace(sent_ms=40, chunks_ms=[], end_ms=900, completion=512, finish="length")
    s(turn_end("a", "s", 1, hidden, 40))
    r = s.report()
    tp = r["throughput"]
    assert r["fleet"]["output_tokens"] == 514
    assert sum(v * dt for v, dt in zip(tp["output_tps"], tp["dt_s"], strict=True)) == (
        pytest.approx(514)
    )
    assert tp["output_tps"][1] * tp["dt_s"][1] == pytest.approx(512 * 400 / 860)


def test_max_cache_hit_rate_is_at_most_one() -> None:
    """A turn's cacheable tokens above its (calibrated) estimate count as the estimate: the
    rate stays ≤ 1 and the report valid against its schema."""
    s = FleetStats()
    ev = fixed_run()[0]
    over = PromptInfo(estimated_tokens=1000, raw_estimate=1000, max_cacheable_tokens=1040)
    under = PromptInfo(estimated_tokens=1000, raw_estimate=1000, max_cacheable_tokens=500)
    s.observe_turn(ev.agent, ev.session_id, ev.turn, ev.metrics, ev.trace, over)
    s.observe_turn(ev.agent, ev.session_id, ev.turn, ev.metrics, ev.trace, under)
    r = s.report()
    assert r["fleet"]["max_cache_hit_rate"] == pytest.approx(1500 / 2000)
    validate(r)


def test_context_by_turn_index() -> None:
    """Turn 0: a's 1000 (b/T0 unreported); turn 1: 1200 and 1500."""
    by_turn = stats_of_fixed_run().report()["context"]["by_turn"]
    t0, t1 = by_turn
    assert t0["turns"] == 2 and t0["context_tokens"]["count"] == 1
    assert t0["context_tokens"]["mean"] == 1000 and t0["cache_hit_rate"] == 0.0
    assert t0["ttft_mean_s"] == pytest.approx(0.225) and t0["output_tokens_mean"] == 3.5
    assert t1["context_tokens"]["mean"] == 1350 and t1["context_tokens"]["max"] == 1500
    assert near(t1["context_tokens"]["p50"], 1200)
    assert t1["cache_hit_rate"] == pytest.approx(1000 / 1200)
    assert t1["ttft_mean_s"] == pytest.approx(0.2) and t1["e2e_mean_s"] == pytest.approx(0.14)
    capped = FleetStats(max_turn_index=1)
    for e in fixed_run():
        capped(e)
    (only,) = capped.report()["context"]["by_turn"]
    assert only["turns"] == 4 and only["open_ended"]


def test_fleet_end_sets_wall_time() -> None:
    """With the FleetEndEvent, rates are over the fleet's wall time, as FleetResult's are."""
    s = stats_of_fixed_run()
    s(FleetEndEvent(result=FleetResult(sessions=[], wall_s=2.5, peak_in_flight=2)))
    f = s.report()["fleet"]
    assert f["wall_s"] == 2.5 and f["duration_s"] == 2.5 and f["peak_in_flight"] == 2
    assert f["output_tps"] == pytest.approx(4.0)


def test_client_prompt_estimate_fills_unreported_context() -> None:
    """A turn without usage but with the client's estimate counts as estimated context."""
    s = FleetStats()
    tr = trace(sent_ms=0, chunks_ms=[10, 20], end_ms=30)
    ev = turn_end("a", "s", 0, tr, 0)
    info = PromptInfo(estimated_tokens=900, raw_estimate=950, max_cacheable_tokens=600)
    s.observe_turn("a", "s", 0, ev.metrics, tr, info)
    reported = trace(sent_ms=0, chunks_ms=[10], end_ms=30, prompt=1000, cached=500)
    ev2 = turn_end("a", "s", 1, reported, 0)
    s.observe_turn("a", "s", 1, ev2.metrics, reported, info)
    r = s.report()
    assert r["provenance"]["prompt_tokens"]["estimated_turns"] == 1
    assert r["provenance"]["prompt_tokens"]["estimated_tokens"] == 900
    assert r["distributions"]["context_tokens"]["count"] == 2
    assert r["fleet"]["max_cache_hit_rate"] == pytest.approx(1200 / 1800)  # client's units
    assert r["fleet"]["cache_hit_rate"] == pytest.approx(0.5)


def test_tool_and_error_events_are_counted() -> None:
    """Tool results and error events add to the fleet's and the agent's counts."""
    from agentflow import ErrorEvent, ToolResultEvent

    s = FleetStats()
    for ok in (True, False):
        s(
            ToolResultEvent(
                agent="a", session_id="s", turn=0, call_id="c", name="t", output="",
                is_error=not ok, duration_s=0.25,
            )
        )  # fmt: skip
    s(ErrorEvent(agent="a", session_id="s", turn=0, where="tool", error=ValueError("x")))
    f = s.report()["fleet"]
    assert (f["tool_calls"], f["tool_errors"], f["tool_s"]) == (2, 1, 0.5)
    assert f["errors"] == {"callback": 0, "session": 0, "tool": 1}
    assert s.agents["a"].tool_errors == 1


def test_itl_can_be_switched_off() -> None:
    """itl=False leaves the ITL sketch empty (and the hot path cheaper)."""
    s = stats_of_fixed_run(itl=False)
    assert s.sketches["itl_s"].count == 0 and s.sketches["ttft_s"].count == 3


def test_samples_only_on_request() -> None:
    """Raw rows are kept only with keep_samples=True."""
    assert stats_of_fixed_run().samples == []
    rows = stats_of_fixed_run(keep_samples=True).samples
    assert [(r.agent, r.turn) for r in rows] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert rows[1].ready_ns == 0 and rows[1].sent_ns == 500 * MS
    assert rows[0].itl_max_s == pytest.approx(0.04) and rows[0].tool_calls == 1


@dataclass(frozen=True)
class _Retry:
    """Stands in for the scheduler's RetryEvent: the stats read only these fields."""

    agent: str
    session_id: str
    type: str = "retry"


def test_retries_are_counted() -> None:
    """A retry event adds to the fleet's and the agent's retries."""
    s = FleetStats()
    s(_Retry("a", "a-1"))  # type: ignore[arg-type]
    s(_Retry("a", "a-1"))  # type: ignore[arg-type]
    assert s.report()["fleet"]["retries"] == 2 and s.agents["a"].retries == 2


def test_token_and_tool_call_events_are_ignored() -> None:
    """Per-token events return at once and leave no trace; event_types says so."""
    from agentflow import TokenEvent, ToolCall, ToolCallEvent

    s = FleetStats()
    s(TokenEvent(agent="a", session_id="s", turn=0, kind="content", text="x", t_ns=1))
    call = ToolCall(index=0, id="c", name="t", arguments="{}")
    s(ToolCallEvent(agent="a", session_id="s", turn=0, call=call))
    assert s.turns == 0 and not s.agents
    assert "token" not in FleetStats.event_types and "turn_end" in FleetStats.event_types


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("bucket_s", math.inf),
        ("bucket_s", 1e300),
        ("bucket_s", math.nan),
        ("bucket_s", "1"),
        ("bucket_s", 0),
        ("max_buckets", 1),
        ("max_buckets", 2.0),
        ("max_turn_index", 0),
        ("relative_accuracy", "0.01"),
        # A huge int: an OverflowError (isfinite), or a ValueError (its repr, past 4,300
        # digits); an accuracy so fine the sketch ran out of memory, or never finished.
        ("bucket_s", 10**400),
        ("relative_accuracy", 10**400),
        pytest.param("max_buckets", -(10**5000), id="max_buckets-vast"),
        ("relative_accuracy", 1e-9),
    ],
)
def test_bad_settings_are_config_errors_naming_them(setting: str, value: object) -> None:
    """Not an OverflowError, TypeError or a ValueError from the time series: a ConfigError
    that names the setting and the value given."""
    with pytest.raises(ConfigError) as refused:
        FleetStats(**{setting: value})  # type: ignore[arg-type]
    assert setting in str(refused.value) and shown(value) in str(refused.value)
