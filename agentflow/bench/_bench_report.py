"""The bench report (``agentflow.bench/1``, ``docs/bench.md``): what ran — target, model,
workload, the config's settings — its level entries, the saturation knee and why the run
stopped; credentials redacted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from agentflow.bench._bench_config import BenchConfig
from agentflow.bench._level_entry import level_failed
from agentflow.bench._targets import Target

__all__ = ["BENCH_SCHEMA_VERSION"]

#: The ``schema_version`` of bench reports.
BENCH_SCHEMA_VERSION = "agentflow.bench/1"


def _report(
    config: BenchConfig,
    target: Target,
    model: str,
    params: Mapping[str, Any],
    levels: list[dict[str, Any]],
    stopped: str,
) -> dict[str, Any]:
    from agentflow._redact import redact_data
    from agentflow._version import __version__

    # The knee is a level the server kept up with: one where sessions failed is not,
    # nor one interrupted (measured only in part). In order of load, not of the run
    # (``--rate 4,2``): the highest level below the lowest one it did not keep up with.
    knee = None
    for entry in sorted(levels, key=lambda e: e["load"]["value"]):
        if entry["saturation"]["saturated"] or level_failed(entry) or entry.get("interrupted"):
            break
        knee = entry["load"]
    run: dict[str, Any] = {
        "target": target.label,
        "model": model,
        "workload": (
            msgspec.to_builtins(config.workload) if config.workload is not None else "scripts"
        ),
        "duration_s": config.duration_s,
        "warmup_s": config.warmup_s,
        "max_sessions": config.max_sessions,
        "seed": config.seed,
        "repeats": config.repeats,
        "arrival": config.arrival,
        "sweep": None
        if config.sweep is None
        else {
            "start": config.sweep.start,
            "factor": config.sweep.factor,
            "max_levels": config.sweep.max_levels,
            "stop_after": config.sweep.stop_after,
            "concurrency": config.concurrency_sweep,
        },
        "slos": [{"name": s.label, "bounds": s.bounds()} for s in config.slos],
        "saturation_rule": {
            "ttft_growth": config.saturation.ttft_growth,
            "min_rise_s": config.saturation.min_rise_s,
            "backlog_growth": config.saturation.backlog_growth,
        },
        "params": dict(params),
        "max_in_flight": config.max_in_flight,
    }
    if config.source is not None:
        run["source"] = dict(config.source)
    report = {
        "schema_version": BENCH_SCHEMA_VERSION,
        "generator": {"name": "agentflow", "version": __version__},
        "run": run,
        "levels": levels,
        "knee": knee,
        "stopped": stopped,
    }
    return redact_data(report)  # type: ignore[no-any-return]
