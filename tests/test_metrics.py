"""Turn metrics follow docs/metrics.md exactly, checked on traces computed by hand."""

from __future__ import annotations

import dataclasses

import pytest

from agentflow import TurnEndEvent, TurnTrace, Usage, turn_metrics

MS = 1_000_000

BASE = TurnTrace(
    endpoint="http://x/v1",
    model="m",
    response_id="r",
    sent_ns=0,
    headers_ns=5 * MS,
    end_ns=130 * MS,
    chunk_ns=(50 * MS, 60 * MS, 80 * MS, 120 * MS),
    chunk_chars=(3, 3, 6, 3),
    chunk_tokens=(1, 1, 2, 1),
    tokens_exact=True,
    n_events=7,
    content="abcdefghijklmno",
    reasoning="",
    tool_calls=(),
    finish_reason="stop",
    usage=Usage(
        prompt_tokens=100,
        completion_tokens=5,
        cached_tokens=64,
        cached_source="prompt_tokens_details",
    ),
    done=True,
)


def test_hand_computed_figures() -> None:
    """TTFT 50 ms; E2E 130 ms; TPOT (130−50)/(5−1) = 20 ms; 50 tok/s; ITL per chunk gap."""
    m = turn_metrics(BASE, ready_ns=-15 * MS)
    assert m.queue_wait_s == pytest.approx(0.015)
    assert m.ttft_s == pytest.approx(0.050)
    assert m.e2e_s == pytest.approx(0.130)
    assert m.tpot_s == pytest.approx(0.020)
    assert m.decode_tps == pytest.approx(50.0)
    assert m.itl_s == pytest.approx((0.010, 0.020, 0.040))
    assert m.tokens_per_chunk == (1, 1, 2, 1)
    assert (m.output_tokens, m.output_tokens_source) == (5, "server_usage")
    assert (m.prompt_tokens, m.cached_tokens, m.cache_hit_rate) == (100, 64, 0.64)


def test_without_usage_counts_chunks_and_says_so() -> None:
    """No usage: output tokens = tokens over chunks, source 'chunk_count'; cache not reported."""
    m = turn_metrics(dataclasses.replace(BASE, usage=None))
    assert (m.output_tokens, m.output_tokens_source) == (5, "chunk_count")
    assert m.cached_tokens is None and m.cache_hit_rate is None
    assert m.queue_wait_s == 0.0


def test_single_token_and_no_output() -> None:
    """One output token has no TPOT; no output chunk has no TTFT — None, never zero."""
    one = dataclasses.replace(
        BASE,
        chunk_ns=(50 * MS,),
        chunk_chars=(1,),
        chunk_tokens=(1,),
        usage=Usage(completion_tokens=1),
    )
    m = turn_metrics(one)
    assert m.ttft_s == pytest.approx(0.05) and m.tpot_s is None and m.decode_tps is None
    empty = dataclasses.replace(
        BASE, chunk_ns=(), chunk_chars=(), chunk_tokens=(), usage=Usage(completion_tokens=0)
    )
    m = turn_metrics(empty)
    assert m.ttft_s is None and m.tpot_s is None and m.itl_s == ()


def test_chunks_in_one_read_have_no_tpot_even_with_a_later_end() -> None:
    """A buffering proxy: all 200 chunks in one read at 2 s, [DONE] in the next read 40 µs
    later. The decode phase was not observed: TPOT is None (not 40 µs / 199) and a TPOT SLO
    fails the turn."""
    from agentflow.stats import SLO

    at = 2000 * MS
    buffered = dataclasses.replace(
        BASE,
        end_ns=at + 40_000,
        chunk_ns=(at,) * 200,
        chunk_chars=(4,) * 200,
        chunk_tokens=(1,) * 200,
        usage=Usage(completion_tokens=200),
    )
    m = turn_metrics(buffered)
    assert m.ttft_s == pytest.approx(2.0) and m.e2e_s > 2.0
    assert m.tpot_s is None and m.decode_tps is None
    assert m.itl_s == (0.0,) * 199
    assert not SLO(tpot_s=0.010).met_by(m)


def _reasoning_model_turn(*, streamed_reasoning: bool) -> TurnTrace:
    """An OpenAI-style reasoning model through the real SSE decoder: 100 content chunks
    10 ms apart from 5 s on, usage counting 1000 reasoning tokens in 1100 completion tokens
    (streamed as reasoning deltas first, or never shown)."""
    import json

    from agentflow.transport import TraceBuilder

    def feed(delta: dict[str, object], t_ns: int) -> None:
        choice = {"index": 0, "delta": delta}
        b.feed(json.dumps({"id": "r", "model": "o3", "choices": [choice]}).encode(), t_ns)

    b = TraceBuilder(endpoint="http://x", sent_ns=0)
    if streamed_reasoning:
        for i in range(1000):
            feed({"reasoning_content": "hmm"}, 1000 * MS + i * 4 * MS)
    for i in range(100):
        feed({"content": "word"}, 5000 * MS + i * 10 * MS)
    usage = {
        "prompt_tokens": 50,
        "completion_tokens": 1100,
        "total_tokens": 1150,
        "completion_tokens_details": {"reasoning_tokens": 1000},
    }
    b.feed(
        json.dumps({"id": "r", "model": "o3", "choices": [], "usage": usage}).encode(), 5991 * MS
    )
    b.feed(b"[DONE]", 5991 * MS)
    return b.finish(5991 * MS)


def test_hidden_reasoning_tokens_are_not_decode_tokens() -> None:
    """Reasoning the server counts but never streams was decoded before the first chunk:
    TPOT spans the 100 visible tokens (99 gaps of 10 ms, +1 ms to [DONE]), not all 1100
    (which made it ~11× too fast, passing a 2 ms bound), and they are not spread over the
    visible chunks. output_tokens stays as reported."""
    from agentflow.stats import SLO, FleetStats

    trace = _reasoning_model_turn(streamed_reasoning=False)
    assert trace.chunk_tokens == (1,) * 100 and trace.tokens_exact
    m = turn_metrics(trace)
    assert (m.output_tokens, m.hidden_reasoning_tokens) == (1100, 1000)
    assert m.tpot_s == pytest.approx(0.991 / 99)
    assert m.decode_tps == pytest.approx(99 / 0.991)
    assert m.tokens_per_chunk == (1,) * 100
    assert m.decode_tokens == 99
    assert not SLO(tpot_s=0.002).met_by(m)
    stats = FleetStats()
    stats(TurnEndEvent(agent="o", session_id="s", turn=0, metrics=m, trace=trace))
    report = stats.report()
    (agent,) = report["agents"]
    assert agent["decode_tps"]["mean"] == pytest.approx(99 / 0.991)
    # Over time: the 1000 hidden tokens in [0, 5 s), before the first chunk; the 100
    # visible ones in [5, 5.991 s). They used to be spread over the visible 0.991 s too.
    tp = report["throughput"]
    tokens = [v * dt for v, dt in zip(tp["output_tps"], tp["dt_s"], strict=True)]
    assert sum(tokens) == pytest.approx(1100)
    assert sum(tokens[:5]) == pytest.approx(1000) and sum(tokens[5:]) == pytest.approx(100)


def test_streamed_reasoning_counts_as_decode() -> None:
    """Reasoning that was streamed is part of the observed decode phase: all 1100 tokens."""
    m = turn_metrics(_reasoning_model_turn(streamed_reasoning=True))
    assert m.hidden_reasoning_tokens == 0
    assert m.ttft_s == pytest.approx(1.0)
    assert m.tpot_s == pytest.approx(4.991 / 1099)
    assert sum(m.tokens_per_chunk) == 1100 and m.decode_tokens == 1099
