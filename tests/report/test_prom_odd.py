"""Prometheus text that is valid but odd: a bucket bound that is no number, NaN and ±Inf
values (JSON has neither), and lines the quick scan used to misread (a tab, an
exemplar, a ``}`` inside a label value). The full parse, the quick scan and the
``server`` section agree on them, and what a report gets is plain JSON."""

from __future__ import annotations

import pytest

from agentflow._errors import ConfigError
from agentflow.report import parse_metrics, server_section
from agentflow.report._prom import quick_values
from tests.report.test_server import VLLM_AFTER, VLLM_BEFORE, valid


def _with(page: str, values: dict[str, str]) -> str:
    """``page`` with the value of each sample whose line starts with a key replaced."""
    lines = []
    for line in page.splitlines():
        for start, value in values.items():
            if line.startswith(start):
                line = f"{line.rpartition(' ')[0]} {value}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("le", ["abc", "NaN", "-Inf", ""])
def test_a_bucket_bound_that_is_no_number_names_the_sample(le: str) -> None:
    """A bucket's ``le`` is parsed with the page: a bad one is a ConfigError naming the
    sample and the value. It was read only when the histogram was, as a bare ValueError
    (a traceback from ``agentflow report``) — or, in the BEFORE scrape, taken as the
    buckets changing between scrapes, "the scrapes are swapped"."""
    page = VLLM_AFTER.replace('le="0.2"', f'le="{le}"')
    with pytest.raises(ConfigError) as info:
        parse_metrics(page)
    assert f"le {le!r}" in str(info.value)
    assert "vllm:time_to_first_token_seconds_bucket{" in str(info.value)


def test_values_that_are_no_numbers_are_left_out_and_noted() -> None:
    """NaN and ±Inf are valid Prometheus values but not JSON numbers: a counter, a gauge
    or a histogram's sum that is one is null in the section (a histogram whose counts
    are is left out whole), and a note names them. They reached ``--write-json`` as bare
    NaN tokens, which the schema (and JSON) forbid."""
    after = _with(
        VLLM_AFTER,
        {
            "vllm:prompt_tokens_total": "NaN",
            "vllm:kv_cache_usage_perc": "+Inf",
            "vllm:time_to_first_token_seconds_sum": "NaN",
        },
    )
    s = valid(server_section(parse_metrics(VLLM_BEFORE), parse_metrics(after, t_ns=10**9)))
    assert s["counters"]["prompt_tokens"] is None and s["counters"]["generation_tokens"] == 80
    assert s["series"]["kv_cache_usage"] == [0.1, None]
    ttft = s["latency"]["ttft_s"]
    assert ttft["mean"] is None and ttft["count"] == 9  # the buckets still hold
    (note,) = [n for n in s["notes"] if "NaN" in n]
    assert "counters.prompt_tokens" in note and "latency.ttft_s.mean" in note
    assert "series.kv_cache_usage[1]" in note
    counts = _with(after, {'vllm:time_to_first_token_seconds_bucket{le="0.4"': "NaN"})
    s = valid(server_section(parse_metrics(VLLM_BEFORE), parse_metrics(counts, t_ns=10**9)))
    assert "ttft_s" not in s["latency"]
    assert "latency.ttft_s" in next(n for n in s["notes"] if "NaN" in n)
    scaled = VLLM_AFTER + "# TYPE agentflow_sim:time_scale gauge\nagentflow_sim:time_scale NaN\n"
    s = valid(server_section(parse_metrics(VLLM_BEFORE), parse_metrics(scaled, t_ns=10**9)))
    assert s["source"]["time_scale"] == 1.0  # not a scale: none


def test_the_quick_scan_reads_odd_lines_as_the_full_parse_does() -> None:
    """Valid exposition text the line scan misread: a tab between an unlabelled name and
    its value (the sample was dropped: ServerWatch's series had no `running` between the
    scrapes), an exemplar after a value (its value, 9999, was read as the counter's: a
    generation rate of 192,000 tok/s from a counter that never moved), a label value
    holding ``}`` or `` # ``, a space before the labels, a timestamp."""
    page = (
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running\t7\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting 2 1700000000000\n"
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{model_name="m"} 100 # {trace_id="abc"} 9999 1.7e9\n'
        'vllm:generation_tokens_total{model_name="a}b # {c\\"}"} 5\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc {model_name="m"} 0.25\n'
        "vllm:kv_cache_usage_perc_other 0.5\n"
    )
    names = [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:generation_tokens_total",
        "vllm:kv_cache_usage_perc",
    ]
    snap = parse_metrics(page)
    assert (
        quick_values(page, names)
        == {n: snap.value(n) for n in names}
        == {
            "vllm:num_requests_running": 7.0,
            "vllm:num_requests_waiting": 2.0,
            "vllm:generation_tokens_total": 105.0,
            "vllm:kv_cache_usage_perc": 0.25,
        }
    )
