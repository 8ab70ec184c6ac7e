"""The Prometheus endpoint, scraped by a real HTTP client and parsed by prometheus_client."""

from __future__ import annotations

import math
import socket
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from agentflow import ConfigError, ErrorEvent, ToolResultEvent
from agentflow.stats import FleetStats, PrometheusExporter
from tests.stats.traces import fixed_run, session_end, trace, turn_end

NAME_RULES = ("agentflow_",)


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams: dict[str, Any], name: str, labels: dict[str, str] | None = None) -> float:
    for fam in fams.values():
        for s in fam.samples:
            if s.name == name and (labels is None or all(s.labels.get(k) == v
                                                          for k, v in labels.items())):  # fmt: skip
                return float(s.value)
    raise KeyError(name)


def fed_exporter(**kwargs: Any) -> PrometheusExporter:
    exp = PrometheusExporter(**kwargs)
    for e in fixed_run():
        exp(e)
    exp(session_end("a", "a-1"))
    exp(
        ToolResultEvent(
            agent="a", session_id="a-1", turn=0, call_id="c", name="t", output="",
            is_error=False, duration_s=0.02,
        )
    )  # fmt: skip
    exp(ErrorEvent(agent="b", session_id="b-1", turn=1, where="session", error=ValueError()))
    return exp


async def test_scrape_over_http() -> None:
    """GET /metrics on loopback; names, types and values as fed."""
    exp = fed_exporter(in_flight=lambda: 3)
    async with exp.serve(port=0) as server:
        assert server.host == "127.0.0.1" and server.port > 0
        async with aiohttp.ClientSession() as http, http.get(server.url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
    fams = families(text)
    assert sample(fams, "agentflow_turns_total") == 4
    assert sample(fams, "agentflow_output_tokens_total", {"source": "server_usage"}) == 8
    assert sample(fams, "agentflow_output_tokens_total", {"source": "chunk_count"}) == 2
    assert sample(fams, "agentflow_prompt_tokens_total") == 3700
    assert sample(fams, "agentflow_cached_prompt_tokens_total") == 1000
    assert sample(fams, "agentflow_sessions_ended_total", {"status": "completed"}) == 1
    assert sample(fams, "agentflow_sessions_active") == 1  # b-1 has not ended
    assert sample(fams, "agentflow_requests_in_flight") == 3
    assert sample(fams, "agentflow_tool_calls_total", {"outcome": "ok"}) == 1
    assert sample(fams, "agentflow_errors_total", {"where": "session"}) == 1
    # TTFT 50, 400, 200 ms: cumulative buckets
    ttft = "agentflow_time_to_first_token_seconds"
    assert fams[ttft].type == "histogram"
    assert sample(fams, f"{ttft}_count") == 3
    assert sample(fams, f"{ttft}_sum") == pytest.approx(0.65)
    assert sample(fams, f"{ttft}_bucket", {"le": "0.05"}) == 1
    assert sample(fams, f"{ttft}_bucket", {"le": "0.2"}) == 2
    assert sample(fams, f"{ttft}_bucket", {"le": "0.5"}) == 3
    assert sample(fams, f"{ttft}_bucket", {"le": "+Inf"}) == 3
    itl = "agentflow_inter_chunk_latency_seconds"
    assert sample(fams, f"{itl}_count") == 6  # per chunk gap: 3 + 1 + 2
    assert sample(fams, f"{itl}_bucket", {"le": "0.01"}) == 3
    assert sample(fams, "agentflow_e2e_request_latency_seconds_count") == 4
    assert sample(fams, "agentflow_decode_tokens_per_second_count") == 3


async def test_names_follow_prometheus_conventions() -> None:
    """Prefix, base units, _total on counters; histograms of seconds end in _seconds."""
    fams = families(fed_exporter().text())
    assert fams, "no metrics"
    for name, fam in fams.items():
        assert name.startswith("agentflow_"), name
        assert name == name.lower() and " " not in name
        if fam.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in fam.samples), name
        if fam.type == "histogram":
            assert name.endswith(("_seconds", "_tokens", "_per_second")), name
            les = [float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket")]
            assert les == sorted(les) and math.isinf(les[-1])
        assert "ms" not in name.split("_"), name
    assert "agentflow_requests_in_flight" not in fams  # only with an in_flight source


def test_private_registry_and_custom_buckets() -> None:
    """Two exporters never collide, and never touch the global registry."""
    a, b = PrometheusExporter(), PrometheusExporter(buckets={"e2e_request_latency_seconds": [1]})
    assert a.registry is not b.registry
    assert REGISTRY.get_sample_value("agentflow_turns_total") is None
    b(fixed_run()[0])
    fams = families(b.text())
    buckets = [s for s in fams["agentflow_e2e_request_latency_seconds"].samples
               if s.name.endswith("_bucket")]  # fmt: skip
    assert [s.labels["le"] for s in buckets] == ["1.0", "+Inf"]
    with pytest.raises(ConfigError, match="no histogram"):
        PrometheusExporter(buckets={"nope": [1.0]})


def test_bucket_bounds_are_numbers_and_inf_is_implied() -> None:
    """A user's list holding +Inf (or a bound twice) still gives one +Inf bucket — a
    second would be a duplicate series to a scraper; a bound that is no number is a
    ConfigError naming the histogram."""
    exp = PrometheusExporter(buckets={"e2e_request_latency_seconds": [1, 5, 5, math.inf]})
    exp(fixed_run()[0])
    fams = families(exp.text())
    les = [s.labels["le"] for s in fams["agentflow_e2e_request_latency_seconds"].samples
           if s.name.endswith("_bucket")]  # fmt: skip
    assert les == ["1.0", "5.0", "+Inf"]
    for bad in (math.nan, -math.inf, "1", True):
        with pytest.raises(ConfigError, match="e2e_request_latency_seconds"):
            PrometheusExporter(buckets={"e2e_request_latency_seconds": [1, bad]})  # type: ignore[list-item]


async def test_openmetrics_negotiation() -> None:
    """A scraper asking for OpenMetrics gets it."""
    exp = fed_exporter()
    async with exp.serve() as server:
        headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
        async with aiohttp.ClientSession() as http, http.get(server.url, headers=headers) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            assert (await r.text()).rstrip().endswith("# EOF")


def test_cache_hit_rate_counts_only_turns_that_reported_cached_tokens() -> None:
    """Two replicas, one reporting 900 of 1000 prompt tokens cached, one reporting no cached
    figure: cached / the cache-reported prompt tokens is FleetStats' 0.9, not 900 / 2000;
    a cached count without a prompt count adds to neither."""
    stats, exp = FleetStats(), PrometheusExporter()
    traces = [
        trace(sent_ms=0, chunks_ms=[10, 20], end_ms=30, completion=2, prompt=1000, cached=900),
        trace(sent_ms=0, chunks_ms=[10, 20], end_ms=30, completion=2, prompt=1000, cached=None),
        trace(sent_ms=0, chunks_ms=[10, 20], end_ms=30, completion=2, prompt=None, cached=500),
    ]
    for i, tr in enumerate(traces):
        event = turn_end("a", f"s{i}", 0, tr, 0)
        stats(event)
        exp(event)
    fams = families(exp.text())
    assert sample(fams, "agentflow_prompt_tokens_total") == 2000
    cached = sample(fams, "agentflow_cached_prompt_tokens_total")
    reported = sample(fams, "agentflow_cache_reported_prompt_tokens_total")
    assert (cached, reported) == (900, 1000)
    assert cached / reported == stats.report()["fleet"]["cache_hit_rate"] == 0.9


def test_no_cached_figure_gives_no_hit_rate_denominator() -> None:
    """A server that never reports cached tokens: the denominator stays 0 (no rate), rather
    than a 0 % hit rate over its prompt tokens."""
    exp = PrometheusExporter()
    tr = trace(sent_ms=0, chunks_ms=[10, 20], end_ms=30, completion=2, prompt=1000)
    exp(turn_end("a", "s", 0, tr, 0))
    fams = families(exp.text())
    assert sample(fams, "agentflow_prompt_tokens_total") == 1000
    assert sample(fams, "agentflow_cache_reported_prompt_tokens_total") == 0


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback")
async def test_url_of_an_ipv6_host_is_bracketed_and_scrapes() -> None:
    """serve(host="::1"): the URL is http://[::1]:port/metrics, which a client can GET
    (without brackets it was not a URL)."""
    async with fed_exporter().serve(host="::1") as server:
        assert server.url == f"http://[::1]:{server.port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(server.url) as resp:
            assert resp.status == 200
            assert sample(families(await resp.text()), "agentflow_turns_total") == 4
