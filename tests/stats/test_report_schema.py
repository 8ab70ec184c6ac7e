"""Every report validates against the JSON Schema shipped in the package, and is plain JSON."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from agentflow.stats import REPORT_SCHEMA_VERSION, SLO, FleetStats, build_report, report_schema
from tests.stats.test_merge import workload
from tests.stats.traces import fixed_run, session_end, trace, turn_end


def validate(report: dict[str, Any]) -> None:
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(report)
    # Plain JSON: no NaN or infinity, and it survives a round trip unchanged.
    text = json.dumps(report, allow_nan=False)
    assert json.loads(text) == report


def test_empty_stats_report_validates() -> None:
    """Nothing observed: every figure null or zero, still a valid report."""
    report = FleetStats().report()
    validate(report)
    assert report["schema_version"] == REPORT_SCHEMA_VERSION == "agentflow.report/2"
    assert report["fleet"]["turns"] == 0 and report["fleet"]["output_tps"] is None
    assert report["distributions"]["ttft_s"]["p50"] is None
    assert report["throughput"]["t_s"] == []


def test_full_report_with_samples_and_slos_validates() -> None:
    """SLOs, extra quantiles, samples, a run section: all in the schema."""
    stats = FleetStats(
        slos=[SLO(ttft_s=0.1), SLO(tpot_s=0.02, itl_max_s=0.5, queue_wait_s=1, name="smooth")],
        quantiles=[0.75, 0.9999],
        keep_samples=True,
        per="session",
    )
    for e in fixed_run():
        stats(e)
    stats(session_end("a", "a-1"))
    report = build_report(
        stats, run={"workload": "fixed", "seed": 0}, include_samples=True, cdf_points=10
    )
    validate(report)
    assert report["settings"]["quantiles"] == ["p50", "p75", "p90", "p99", "p99.9", "p99.99"]
    assert report["distributions"]["e2e_s"]["p75"] is not None
    assert len(report["samples"]) == 4 and report["run"] == {"workload": "fixed", "seed": 0}
    cdf = report["distributions"]["ttft_s"]["cdf"]
    assert cdf[0] == [0.0, 0.05] and cdf[-1] == [1.0, 0.4]
    assert [q for q, _ in cdf] == sorted(q for q, _ in cdf)


def test_larger_report_validates() -> None:
    """Hundreds of turns, some without usage: still valid."""
    stats = FleetStats(slos=[SLO(e2e_s=1.0)])
    for e in workload(60, seed=3):
        stats(e)
    validate(stats.report())


def test_schema_rejects_a_wrong_report() -> None:
    """The schema is strict: a missing section or a wrong version fails."""
    report = FleetStats().report()
    bad = dict(report, schema_version="agentflow.report/1")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, report_schema())
    missing = {k: v for k, v in report.items() if k != "fleet"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(missing, report_schema())


def test_token_series_nobody_reported_are_null_not_zero() -> None:
    """No turn reported its prompt tokens (a server without usage), or its cached tokens
    (vLLM without ``--enable-prompt-tokens-details``): every bucket of that series is
    null, as the fleet's figure is — they used to be 0.0, which reads as measured."""
    no_usage = trace(sent_ms=0, chunks_ms=[200, 400], end_ms=600)
    no_cache = trace(sent_ms=0, chunks_ms=[200, 400], end_ms=600, completion=2, prompt=500)
    for tr, prompt_nulls in ((no_usage, True), (no_cache, False)):
        stats = FleetStats(bucket_s=0.5)
        stats(turn_end("a", "s", 0, tr, ready_ms=0))
        report = stats.report()
        validate(report)
        fleet, series = report["fleet"], report["throughput"]
        assert len(series["t_s"]) == 2
        assert fleet["cached_tokens"] is None and series["cached_tps"] == [None, None]
        assert (fleet["prompt_tokens"] is None) is prompt_nulls
        assert series["prompt_tps"] == ([None, None] if prompt_nulls else [1000.0, 0.0])
