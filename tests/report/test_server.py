"""The server cross-check: parsing /metrics in three dialects, deltas and bucket quantiles
checked by hand, and a fleet run against the simulator over real HTTP whose counts the
server's counters must match exactly."""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema
import pytest

from agentflow import Agent, Fleet, HTTPTransport
from agentflow._errors import TransportError
from agentflow.llamacpp import LlamaCppServer
from agentflow.report import (
    HistogramData,
    ServerWatch,
    metrics_url,
    parse_metrics,
    scrape,
    server_section,
    server_section_schema,
)
from agentflow.report._prom import quick_values
from agentflow.report._server import detect_dialect
from agentflow.sim.server import SimServer
from agentflow.stats import FleetStats, report_schema

VLLM_BEFORE = """\
# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m"} 100.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{model_name="m"} 10.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="m"} 100.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m"} 50.0
# TYPE vllm:request_success counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 1.0
vllm:request_success_total{finished_reason="length",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.2",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.4",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.2
"""

VLLM_AFTER = """\
# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m"} 1100.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{model_name="m"} 90.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="m"} 1100.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m"} 850.0
# TYPE vllm:request_success counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 7.0
vllm:request_success_total{finished_reason="length",model_name="m"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.3
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{le="0.2",model_name="m"} 7.0
vllm:time_to_first_token_seconds_bucket{le="0.4",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 11.0
vllm:time_to_first_token_seconds_count{model_name="m"} 11.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 2.6
"""

# The real llama.cpp server's page (xllamacpp, agentflow.llamacpp), trimmed.
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total {cached}
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {predicted}
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total {seconds}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {processing}
"""

SGLANG = """\
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m"}} {gen}
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{model_name="m"}} {cached}
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="m"}} 0.25
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m"}} 3
"""


def test_histogram_quantiles_interpolate_inside_buckets_as_prometheus_does() -> None:
    h = HistogramData((0.1, 0.2, 0.4, math.inf), (2.0, 6.0, 8.0, 8.0), 8.0, 1.6)
    # p50: rank 4 of 8 lies in (0.1, 0.2], which holds ranks 3–6: 0.1 + 0.1 × (4 − 2) / 4.
    assert h.quantile(0.5) == pytest.approx(0.15)
    assert h.quantile(0.25) == pytest.approx(0.1)  # rank 2: the first bucket's edge
    assert h.quantile(1.0) == pytest.approx(0.4)
    assert h.mean == pytest.approx(0.2)
    # A rank in the +Inf bucket: the largest finite bound, as histogram_quantile.
    tail = HistogramData((0.1, math.inf), (1.0, 2.0), 2.0, 5.0)
    assert tail.quantile(0.99) == 0.1
    assert HistogramData((0.1, math.inf), (0.0, 0.0), 0.0, 0.0).quantile(0.5) is None


def valid(section: dict[str, Any]) -> dict[str, Any]:
    """``section``, checked against the shipped JSON Schema (and plain JSON: no NaN)."""
    jsonschema.validate(section, server_section_schema())
    json.dumps(section, allow_nan=False)
    return section


def test_vllm_deltas_by_hand() -> None:
    before, after = parse_metrics(VLLM_BEFORE, t_ns=0), parse_metrics(VLLM_AFTER, t_ns=10**9)
    dialect = detect_dialect(after)
    assert dialect is not None and dialect.name == "vllm"
    s = valid(server_section(before, after))
    c = s["counters"]
    assert (c["prompt_tokens"], c["generation_tokens"], c["requests"]) == (1000, 80, 9)
    assert (c["cache_queries"], c["cache_hits"]) == (1000, 800)
    assert s["cache_hit_rate"] == pytest.approx(0.8)
    ttft = s["latency"]["ttft_s"]
    # 9 new observations: buckets (0.1: 2, 0.2: 5, 0.4: 8, +Inf: 9), sum 2.4.
    assert ttft["count"] == 9 and ttft["mean"] == pytest.approx(2.4 / 9)
    assert ttft["buckets"] == [[0.1, 2.0], [0.2, 5.0], [0.4, 8.0]]
    assert ttft["p50"] == pytest.approx(0.1 + 0.1 * (4.5 - 2) / 3)
    assert s["series"]["kv_cache_usage"] == [0.1, 0.3]
    assert s["series"]["cache_hit_rate"] == [None, pytest.approx(0.8)]
    assert s["series"]["generation_tps"] == [None, pytest.approx(80.0)]


def test_the_simulators_engine_seconds_are_scaled_to_wall_seconds() -> None:
    scale = "# TYPE agentflow_sim:time_scale gauge\nagentflow_sim:time_scale 10.0\n"
    s = server_section(parse_metrics(VLLM_BEFORE + scale), parse_metrics(VLLM_AFTER + scale))
    assert s["source"]["time_scale"] == 10.0
    assert s["latency"]["ttft_s"]["mean"] == pytest.approx(24 / 9)
    assert s["latency"]["ttft_s"]["buckets"][0] == [1.0, 2.0]
    assert any("time scale (10)" in n for n in s["notes"])


def test_llamacpp_counts_cached_prompt_tokens_apart() -> None:
    page = LLAMACPP.format
    before = parse_metrics(page(prompt=32, cached=0, predicted=16, seconds=4.0, processing=0))
    after = parse_metrics(page(prompt=52, cached=300, predicted=116, seconds=6.0, processing=1))
    s = valid(server_section(before, after, client={"fleet": {"turns": 20}}))
    assert s["source"]["dialect"] == "llamacpp"
    c = s["counters"]
    assert c["prompt_tokens"] == 320  # 20 computed + 300 reused
    assert c["cache_hits"] == 300 and s["cache_hit_rate"] == pytest.approx(300 / 320)
    # each of the 20 requests' first token took none of the 2 s predicting
    assert s["decode_tps"] == pytest.approx((100 - 20) / 2.0)
    assert s["latency"] == {} and s["series"]["running"] == [0.0, 1.0]


def test_sglang_names() -> None:
    before = parse_metrics(SGLANG.format(prompt=0, gen=0, cached=0))
    after = parse_metrics(SGLANG.format(prompt=400, gen=40, cached=100))
    s = valid(server_section(before, after))
    assert s["source"]["dialect"] == "sglang"
    assert s["counters"]["cache_hits"] == 100 and s["cache_hit_rate"] == pytest.approx(0.25)
    assert s["series"]["kv_cache_usage"] == [0.25, 0.25]


def test_quick_scan_reads_what_the_full_parse_reads() -> None:
    snap = parse_metrics(VLLM_AFTER)
    names = ["vllm:prefix_cache_hits_total", "vllm:kv_cache_usage_perc", "vllm:request_success"]
    got = quick_values(VLLM_AFTER, names, means=["vllm:kv_cache_usage_perc"])
    assert got == {"vllm:prefix_cache_hits_total": 850.0, "vllm:kv_cache_usage_perc": 0.3}
    assert snap.value("vllm:request_success_total") == 11.0


def test_metrics_url() -> None:
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"


def _agent(i: int) -> Agent:
    return Agent(
        name=f"a{i}",
        model="agentflow-sim",
        instructions="You are a careful assistant. " * 40,  # a shared, cacheable prefix
        params={"max_tokens": 24},
    )


async def test_against_the_simulator_over_http_the_counts_match_exactly() -> None:
    """Client and server count the same tokens; the server's TTFT cannot exceed the
    client's (the client's includes the network); KV usage was sampled during the run."""
    async with SimServer("cpu-tiny", time_scale=1.0) as sim:
        stats = FleetStats()
        async with (
            HTTPTransport(sim.base_url) as transport,
            ServerWatch(sim.base_url, interval_s=0.02) as watch,
        ):
            fleet = Fleet(transport, max_concurrency=8, callbacks=[stats])
            result = await fleet.run(_agent(i).session(f"Task {i}.") for i in range(12))
        assert not result.failed
        report = stats.report()
        s = valid(watch.section(report))
    # With the section, the report validates against the shipped report schema.
    jsonschema.validate({**report, "server": s}, report_schema())
    f = report["fleet"]
    c = s["counters"]
    assert s["source"]["dialect"] == "vllm" and s["source"]["failed_scrapes"] == 0
    assert c["generation_tokens"] == f["output_tokens"]
    assert c["prompt_tokens"] == f["prompt_tokens"]
    assert c["cache_hits"] == f["cached_tokens"] and c["cache_hits"] > 0
    assert c["requests"] == f["turns"] == 12
    assert s["latency"]["ttft_s"]["count"] == 12
    assert s["latency"]["ttft_s"]["mean"] <= report["distributions"]["ttft_s"]["mean"]
    assert s["latency"]["e2e_s"]["mean"] <= report["distributions"]["e2e_s"]["mean"]
    rows = {r["figure"]: r for r in s["comparison"]}
    assert rows["output_tokens"]["ratio"] == 1.0 and rows["cached_tokens"]["ratio"] == 1.0
    kv = [v for v in s["series"]["kv_cache_usage"] if v is not None]
    assert len(kv) == len(s["series"]["t_s"]) >= 2 and all(0 <= v <= 1 for v in kv)


def test_the_report_schema_embeds_the_server_section_schema() -> None:
    """One schema, two files: the report's ``server`` property is the section's schema
    (with its own ``$id``, so its ``#/$defs/...`` references resolve inside it)."""
    embedded = report_schema()["properties"]["server"]
    section = {k: v for k, v in server_section_schema().items() if k != "$schema"}
    assert embedded == section


async def test_a_server_without_metrics_is_a_transport_error_saying_how_to_enable_them() -> None:
    async with SimServer("cpu-tiny") as sim:
        with pytest.raises(TransportError, match=r"HTTP 404.*--metrics"):
            await scrape(f"{sim.url}/nothing-here/metrics")
        snap = await scrape(sim.base_url)
    assert snap.counter("vllm:generation_tokens") == 0


@pytest.mark.llamacpp
async def test_against_llamacpp_the_counts_match(llamacpp: LlamaCppServer) -> None:
    """llama.cpp's counters (its /metrics is on in agentflow.llamacpp) agree with usage."""
    agent = Agent(name="l", model="smollm2", instructions="Be brief.", params={"max_tokens": 8})
    stats = FleetStats()
    async with (
        HTTPTransport(llamacpp.base_url) as transport,
        ServerWatch(llamacpp.base_url, interval_s=0) as watch,
    ):
        result = await Fleet(transport, max_concurrency=2, callbacks=[stats]).run(
            agent.session(q) for q in ("Name a colour.", "Name a fruit.", "Name a tree.")
        )
    report = stats.report()
    s = watch.section(report)
    assert s["source"]["dialect"] == "llamacpp"
    assert s["counters"]["generation_tokens"] == report["fleet"]["output_tokens"]
    assert s["counters"]["prompt_tokens"] == report["fleet"]["prompt_tokens"]
    # The decode speed is llama.cpp's own per-request one, (predicted_n − 1) /
    # predicted_ms, summed over the requests (it was n / (n − 1) higher).
    timings = [t.trace.server_timings for r in result.sessions for t in r.turns]
    assert all(t is not None for t in timings)
    own = sum(t["predicted_n"] - 1 for t in timings if t) / sum(
        t["predicted_ms"] for t in timings if t
    )
    # (llama.cpp's /metrics seconds and its per-request timings were seen 0.12% apart
    # once — the two are kept separately by the server — so this checks the formula, the
    # n / (n − 1) it used to be off by being ~14% at 8 tokens, not the server's rounding.)
    assert s["decode_tps"] == pytest.approx(own * 1e3, rel=1e-2)


def test_an_older_vllms_per_token_histogram_is_an_itl_not_a_tpot() -> None:
    """A vLLM that exports only vllm:time_per_output_token_seconds (per token, before
    the ITL name): it is read as the ITL, and no TPOT is compared (it was read as the
    per-request TPOT, 1,000 server counts against 10 client turns)."""
    page = (
        "# TYPE vllm:time_per_output_token_seconds histogram\n"
        'vllm:time_per_output_token_seconds_bucket{{le="0.01"}} {n}\n'
        'vllm:time_per_output_token_seconds_bucket{{le="+Inf"}} {n}\n'
        "vllm:time_per_output_token_seconds_sum {s}\n"
        "vllm:time_per_output_token_seconds_count {n}\n"
    )
    before = parse_metrics(VLLM_BEFORE + page.format(n=0, s=0.0), t_ns=0)
    after = parse_metrics(VLLM_AFTER + page.format(n=1000, s=5.0), t_ns=10**9)
    s = valid(server_section(before, after))
    assert s["latency"]["itl_s"]["count"] == 1000
    assert "tpot_s" not in s["latency"]


def test_a_restart_between_the_scrapes_leaves_the_counters_out_not_negative() -> None:
    """A server that restarted during the run (its counters and histograms start again
    from 0): ``ServerWatch.section()`` reported every difference negative — −10
    generation tokens, a histogram of −2 observations — as the server's figures. They
    are left out now, and a note says why; the gauges are kept."""
    restarted = parse_metrics(
        VLLM_BEFORE.replace(" 100.0", " 3.0")
        .replace(" 50.0", " 1.0")
        .replace('_total{model_name="m"} 10.0', '_total{model_name="m"} 2.0')
        .replace('le="+Inf",model_name="m"} 2.0', 'le="+Inf",model_name="m"} 0.0')
        .replace('_count{model_name="m"} 2.0', '_count{model_name="m"} 0.0')
        .replace('le="0.2",model_name="m"} 2.0', 'le="0.2",model_name="m"} 0.0')
        .replace('le="0.4",model_name="m"} 2.0', 'le="0.4",model_name="m"} 0.0')
        .replace('le="0.1",model_name="m"} 1.0', 'le="0.1",model_name="m"} 0.0'),
        t_ns=10**9,
    )
    before = parse_metrics(VLLM_AFTER, t_ns=0)
    s = valid(server_section(before, restarted))
    c = s["counters"]
    assert c["generation_tokens"] is None and c["prompt_tokens"] is None
    assert all(v is None or v >= 0 for v in c.values())
    assert "ttft_s" not in s["latency"]
    assert s["cache_hit_rate"] is None and s["decode_tps"] is None
    assert s["series"]["generation_tps"] == [None, None]
    assert s["series"]["cache_hit_rate"] == [None, None]
    assert s["series"]["kv_cache_usage"] == [0.3, 0.1]
    (note,) = [n for n in s["notes"] if "went down" in n]
    assert "generation_tokens" in note and "ttft_s" in note


def test_the_clients_requests_count_its_summary_requests() -> None:
    """The server counts every request it finished, a context policy's summary requests
    too; the client's side of the ``requests`` row was its turns and retried attempts
    only, so a fleet that compacted read fewer requests than the server did (7 of 9)."""
    before, after = parse_metrics(VLLM_BEFORE, t_ns=0), parse_metrics(VLLM_AFTER, t_ns=10**9)
    stats = FleetStats()
    report = stats.report()
    report["fleet"].update(turns=6, retries=1, compaction={"requests": 2, "output_tokens": 4})
    s = valid(server_section(before, after, client=report))
    (row,) = [r for r in s["comparison"] if r["figure"] == "requests"]
    assert (row["client"], row["server"], row["ratio"]) == (9, 9, 1.0)
    assert "summary requests" in row["note"]
    report["fleet"]["compaction"] = None  # not seen: the turns and retries alone
    s = server_section(before, after, client=report)
    (row,) = [r for r in s["comparison"] if r["figure"] == "requests"]
    assert row["client"] == 7
