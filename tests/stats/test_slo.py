"""SLO bounds: what they accept, and what meeting them means at the edges."""

from __future__ import annotations

import math

import pytest

from agentflow import ConfigError, turn_metrics
from agentflow.stats import SLO, FleetStats
from tests.stats.traces import trace, turn_end


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -1.0, True, "2"])
@pytest.mark.parametrize("key", ["ttft_s", "tpot_s", "e2e_s", "queue_wait_s", "itl_max_s"])
def test_a_bound_is_a_finite_number_above_zero(key: str, value: object) -> None:
    """Infinity would reach settings.slos and goodput bounds as non-JSON ``Infinity``."""
    with pytest.raises(ConfigError, match=rf"SLO {key} must be a finite number > 0, got"):
        SLO(**{key: value})  # type: ignore[arg-type]


def test_an_unknown_tpot_fails_a_tpot_bound_unless_there_was_no_decode_phase() -> None:
    """Three tokens whose chunks and end arrived in one read (E2E = TTFT), or usage-only
    output without a chunk: TPOT unknown, so the bound is not shown met — it fails. One
    output token had no decode phase and passes, as in vLLM's benchmark."""
    one_read = turn_metrics(trace(sent_ms=0, chunks_ms=[2000] * 3, end_ms=2000, completion=3))
    hidden = turn_metrics(trace(sent_ms=0, chunks_ms=[], end_ms=900, completion=512))
    one_token = turn_metrics(trace(sent_ms=0, chunks_ms=[5], end_ms=10, completion=1))
    slo = SLO(tpot_s=0.001)
    for m in (one_read, hidden):
        assert m.output_tokens >= 2 and m.tpot_s is None
        assert not slo.met_by(m) and slo.failed_bounds(m) == ["tpot_s"]
    assert one_token.tpot_s is None
    assert slo.met_by(one_token) and slo.failed_bounds(one_token) == []


def test_a_figure_exactly_at_its_bound_meets_it() -> None:
    """60,000,000 ns is 0.06 s exactly as the float nearest it: nanoseconds become seconds
    by dividing (``ns * 1e-9`` gave 0.060000000000000005, and SLO(ttft_s=0.06) failed a
    turn whose TTFT was exactly 60 ms). Also the report's per-agent times."""
    m = turn_metrics(
        trace(sent_ms=100, chunks_ms=[160, 170, 190], end_ms=230, completion=3),
        ready_ns=70 * 1_000_000,
    )
    assert (m.queue_wait_s, m.ttft_s, m.e2e_s) == (0.03, 0.06, 0.13)
    assert m.itl_s == (0.01, 0.02)
    slo = SLO(ttft_s=0.06, e2e_s=0.13, queue_wait_s=0.03, itl_max_s=0.02)
    assert slo.met_by(m) and slo.failed_bounds(m) == []
    stats = FleetStats(start_ns=0)
    stats(turn_end("a", "s", 0, trace(sent_ms=100, chunks_ms=[160], end_ms=290), ready_ms=60))
    row = stats.report()["agents"][0]
    assert (row["first_s"], row["last_s"]) == (0.06, 0.29)
