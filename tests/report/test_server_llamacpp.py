"""The server section on llama.cpp's counters: its decode speed beside the client's.

llama.cpp times a request's prediction from its first token to its last (its
``timings.predicted_ms``: the client's E2E − TTFT), so its own speed is
(predicted_n − 1) / predicted_ms. Recorded-style traces and pages; no server.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.report import GaugeSample, parse_metrics, server_section
from agentflow.report._prom import MetricsSnapshot
from agentflow.stats import FleetStats
from tests.stats.traces import trace, turn_end

PAGE = """\
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {predicted}
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total {seconds}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
"""

# Four 5-token answers (max_tokens 5, one token a chunk) from one slot; their first-to-
# last-token spans in ms, as measured against llama.cpp (client E2E − TTFT, which
# llama.cpp's predicted_ms matched): decode speeds from 6 to 200 tokens/s.
SPANS_MS = {("a", 0): 34.84, ("a", 1): 673.01, ("b", 0): 177.37, ("b", 1): 20.0}
TOKENS = 5


def client_report() -> dict[str, Any]:
    stats = FleetStats()
    t = 0.0
    for (agent, turn), span in SPANS_MS.items():
        first = t + 10
        chunks = [first + span * k / (TOKENS - 1) for k in range(TOKENS)]
        tr = trace(sent_ms=t, chunks_ms=chunks, end_ms=chunks[-1], completion=TOKENS, prompt=9)
        stats(turn_end(agent, f"{agent}-1", turn, tr, ready_ms=t))
        t = chunks[-1] + 1
    return stats.report()


def pages(seconds: float) -> tuple[MetricsSnapshot, MetricsSnapshot]:
    n = len(SPANS_MS)
    before = parse_metrics(PAGE.format(prompt=0, predicted=0, seconds=0.0), t_ns=0)
    after = parse_metrics(
        PAGE.format(prompt=9 * n, predicted=TOKENS * n, seconds=seconds), t_ns=10**9
    )
    return before, after


def test_decode_speed_leaves_out_each_requests_first_token_and_matches_the_client() -> None:
    """The section divided all tokens predicted by the seconds predicting (n / (n − 1)
    too fast: ×1.25 at 5 tokens a request), and set it beside the client's mean of
    per-turn 1/TPOT (a ratio of 0.76 when every request matched). Now both sides are
    token-weighted, and requests that match on both sides compare at a ratio of 1."""
    seconds = sum(SPANS_MS.values()) / 1e3
    before, after = pages(seconds)
    report = client_report()
    s = server_section(before, after, client=report)
    decoded = (TOKENS - 1) * len(SPANS_MS)
    assert s["decode_tps"] == pytest.approx(decoded / seconds)
    (row,) = [r for r in s["comparison"] if r["figure"] == "decode_tps"]
    assert row["client"] == pytest.approx(decoded / seconds)
    assert row["ratio"] == pytest.approx(1.0)
    assert "token-weighted" in row["note"]
    # llama.cpp's own per-request figure, (predicted_n − 1) / predicted_ms, summed alike
    own = sum(TOKENS - 1 for _ in SPANS_MS) / sum(SPANS_MS.values()) * 1e3
    assert s["decode_tps"] == pytest.approx(own)


def test_without_the_clients_count_of_requests_decode_speed_is_null_and_noted() -> None:
    """llama.cpp exports no count of requests: without the client's report the speed
    cannot be worked out (null, never the tokens / seconds that is n / (n − 1) too fast)."""
    before, after = pages(sum(SPANS_MS.values()) / 1e3)
    s = server_section(before, after)
    assert s["decode_tps"] is None
    assert any("decode_tps is null" in n for n in s["notes"])


def test_a_note_says_llamacpps_generation_rate_over_time_moves_only_when_requests_end() -> None:
    """llama.cpp's counters move only when a request ends: series.generation_tps read 0
    while four requests were decoding, then a spike, with nothing saying why."""
    before, after = pages(sum(SPANS_MS.values()) / 1e3)
    samples = [GaugeSample(5 * 10**8, {"generation_tokens": 0.0, "running": 4.0})]
    s = server_section(before, after, samples=samples, client=client_report())
    # four requests decoding at 0.5 s, none ended yet; all 20 tokens counted by 1 s
    assert s["series"]["generation_tps"] == [None, 0.0, pytest.approx(20 / 0.5)]
    (note,) = [n for n in s["notes"] if "series.generation_tps" in n]
    assert "only when the request ends" in note and "spikes" in note


def test_compaction_requests_count_as_requests_in_llamacpps_decode_speed() -> None:
    """A context policy's compaction requests finish on the same server and llama.cpp
    counts their tokens and seconds, but only the client's turns were taken as the
    requests: 4 turns + 2 compactions of 5 tokens over 0.6 s read 43.3 tokens/s, not the
    (30 − 6) / 0.6 = 40 each request's first-to-last-token span gives."""
    report = client_report()
    report["fleet"]["compaction"] = {"requests": 2, "output_tokens": 10}
    before = parse_metrics(PAGE.format(prompt=0, predicted=0, seconds=0.0), t_ns=0)
    after = parse_metrics(PAGE.format(prompt=54, predicted=30, seconds=0.6), t_ns=10**9)
    s = server_section(before, after, client=report)
    assert s["decode_tps"] == pytest.approx((30 - 6) / 0.6)
    (note,) = [n for n in s["notes"] if "compaction requests" in n]
    assert "other clients" in note
    # a report without compaction (null or absent) counts the turns alone
    report["fleet"]["compaction"] = None
    assert server_section(before, after, client=report)["decode_tps"] == pytest.approx(
        (30 - 4) / 0.6
    )
