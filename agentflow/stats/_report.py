"""The versioned JSON report built from :class:`FleetStats` (``docs/report-schema.md``).

The report is plain JSON (no NaN or infinity; ``null`` = not measured or not reported)
and says which schema it follows in ``schema_version``. Its JSON Schema ships with the
package: :func:`report_schema`. Downstream tools (``agentflow report``, plots, the
server cross-check) read this file and nothing else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow._redact import redact_data
from agentflow.stats._sketch import Sketch, nearest_rank, quantile_name
from agentflow.stats._slo import slo_table

if TYPE_CHECKING:
    from agentflow.stats._fleet_stats import FleetStats

__all__ = ["REPORT_SCHEMA_VERSION", "build_report", "exact_distribution", "report_schema"]

#: The ``schema_version`` of reports this version writes.
REPORT_SCHEMA_VERSION = "agentflow.report/2"

#: Extra points of every CDF, for the tail.
_TAIL = (0.995, 0.999, 0.9995, 0.9999)

_UNITS = {
    "queue_wait_s": "s",
    "ttft_s": "s",
    "tpot_s": "s",
    "itl_s": "s",
    "e2e_s": "s",
    "decode_tps": "tokens/s",
    "context_tokens": "tokens",
    "output_tokens": "tokens",
}

_NS = 1e9  # ns → s by dividing: correctly rounded (× 1e-9 made 60 ms 0.060000000000000005)


def build_report(
    stats: FleetStats,
    *,
    run: dict[str, Any] | None = None,
    cdf_points: int = 100,
    include_samples: bool = False,
) -> dict[str, Any]:
    """The JSON report of ``stats`` (schema ``agentflow.report/2``).

    Args:
        stats: what to report.
        run: free-form settings of the run (workload, server, time scale…), copied with
            credentials masked (``agentflow.redact``).
        cdf_points: each distribution's CDF is sampled at ``cdf_points + 1`` evenly
            spaced quantiles plus p99.5, p99.9, p99.95 and p99.99 (0: no CDF).
        include_samples: add every turn's row (needs ``FleetStats(keep_samples=True)``).

    Raises:
        ConfigError: ``include_samples`` of stats missing some turn's row — built
            without ``keep_samples=True``, or merged from some that were (a short list
            would read as a run with fewer turns). Stats merged from workers that all
            kept samples hold every row, whatever the target's own setting.
    """
    from agentflow._version import __version__

    if include_samples and len(stats.samples) < stats.turns:
        raise ConfigError(_missing_samples(stats))

    duration = stats.duration_s
    labels = [s.label for s in stats.slos]
    origin = stats.origin_ns
    report: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "generator": {"name": "agentflow", "version": __version__},
        "run": dict(run or {}),
        "settings": {
            "relative_accuracy": stats.relative_accuracy,
            "quantiles": [quantile_name(q) for q in stats.quantiles],
            "per": stats.per,
            "itl": stats.itl,
            "bucket_s": stats.series.width_ns / _NS,
            "max_turn_index": stats.by_turn.max_index,
            "workers": max(stats.workers, 1),  # stats that saw nothing are still one's
            "slos": slo_table(stats.slos),
        },
        "fleet": _fleet(stats, duration),
        "distributions": {
            name: _distribution(sk, stats.quantiles, _UNITS[name], cdf_points)
            for name, sk in stats.sketches.items()
        },
        "per_agent": _per_agent(stats),
        "goodput": _goodput(stats, duration),
        "throughput": _throughput(stats, origin),
        "context": {"by_turn": stats.by_turn.to_report()},
        "provenance": _provenance(stats),
        "agents": [
            row.to_report(labels, origin, tools=stats.tool_outcomes)
            for _, row in sorted(stats.agents.items())
        ],
        "tools": {
            name: {
                "calls": t.calls,
                "errors": t.errors,
                "total_s": t.durations.sum,
                "duration_s": _distribution(t.durations, stats.quantiles, "s", 0),
            }
            for name, t in sorted(stats.tools.items())
        },
    }
    # No credential leaves in a report: the run settings may hold a URL with userinfo,
    # error texts a key a server echoed. (Samples are per-turn numbers and names: skipped,
    # a report can hold 100,000 of them.)
    report = redact_data(report)
    if include_samples:
        report["samples"] = [r.to_dict() for r in stats.samples]
    return report


def _missing_samples(stats: FleetStats) -> str:
    """Why ``stats`` cannot report every turn's row."""
    if not stats.samples:
        return (
            "report(include_samples=True) needs FleetStats(keep_samples=True): these stats "
            f"kept no per-turn rows (of {stats.turns} turns)"
        )
    return (
        "report(include_samples=True) needs FleetStats(keep_samples=True) in every merged "
        f"worker: only {len(stats.samples)} of {stats.turns} turns kept a row"
    )


@cache
def _schema_text() -> str:
    return resources.files("agentflow.stats").joinpath("report.schema.json").read_text("utf-8")


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``agentflow.report/2`` reports."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


def exact_distribution(values: Sequence[float], quantiles: Sequence[float]) -> dict[str, Any]:
    """Count, mean, min, max and quantiles of ``values``, exactly.

    A quantile is the nearest-rank one (:func:`~agentflow.stats.nearest_rank`), the
    definition the sketches approximate.
    """
    n = len(values)
    ordered = sorted(values)
    out: dict[str, Any] = {
        "count": n,
        "mean": math.fsum(ordered) / n if n else None,
        "min": ordered[0] if n else None,
        "max": ordered[-1] if n else None,
    }
    for q in quantiles:
        out[quantile_name(q)] = ordered[nearest_rank(q, n)] if n else None
    return out


def _fleet(stats: FleetStats, duration: float) -> dict[str, Any]:
    sessions = sum(stats.sessions.values())
    completed = stats.sessions["completed"]
    # Token totals are the server's work for the fleet: every turn's and every context
    # policy's summary request's (``compaction`` has those apart).
    output = stats.output_tokens + stats.compaction_output_tokens
    prompted = stats.prompt_turns + stats.compaction_prompt_requests
    prompt = stats.prompt_tokens + stats.compaction_prompt_tokens
    cache_prompt = stats.cache_prompt_tokens + stats.compaction_cache_prompt_tokens
    cached_tokens = stats.cached_tokens + stats.compaction_cached_tokens
    cached = cache_prompt > 0
    tools, errors = stats.tool_outcomes, stats.errors.items()
    seen = {"tool": tools, "callback": stats.callback_outcomes}
    return {
        "sessions": sessions,
        "completed": completed,
        "failed": sessions - completed,
        "statuses": dict(sorted(stats.sessions.items())),
        "unfinished": stats.unfinished,
        "agents": len(stats.agents),
        "turns": stats.turns,
        "no_output_turns": stats.no_output_turns,
        "wall_s": stats.wall_s,
        "duration_s": duration,
        "peak_in_flight": stats.peak_in_flight,
        "output_tokens": output,
        "output_tps": output / duration if duration > 0 else None,
        "turns_per_s": stats.turns / duration if duration > 0 else None,
        "prompt_tokens": prompt if prompted else None,
        "prompt_tps": prompt / duration if prompted and duration > 0 else None,
        "total_tps": (prompt + output) / duration if prompted and duration > 0 else None,
        "cached_tokens": cached_tokens if cached else None,
        "cache_hit_rate": cached_tokens / cache_prompt if cached else None,
        "compaction": _compaction(stats),
        "max_cache_hit_rate": (
            stats.cacheable_tokens / stats.cacheable_prompt_tokens
            if stats.cacheable_prompt_tokens
            else None
        ),
        "reconnects": stats.reconnects,
        "retries": stats.retries,
        "tool_calls": stats.tool_calls,
        # null, not 0, when tool outcomes were not seen (a result without its journal)
        "tool_errors": stats.tool_errors if tools else None,
        "tool_s": stats.tool_s if tools else None,
        "errors": {k: None if not seen.get(k, True) else n for k, n in sorted(errors)},
        "callback_errors": stats.callback_errors,
        "finish_reasons": dict(sorted(stats.finish_reasons.items())),
    }


def _compaction(stats: FleetStats) -> dict[str, Any] | None:
    """The context policies' summary requests, or ``None`` when not seen (from a result)."""
    if not stats.compactions_seen:
        return None
    reported = stats.compaction_prompt_requests
    return {
        "requests": stats.compactions,
        "prompt_tokens": stats.compaction_prompt_tokens if reported else None,
        "cached_tokens": (
            stats.compaction_cached_tokens if stats.compaction_cache_prompt_tokens else None
        ),
        "output_tokens": stats.compaction_output_tokens,
        "e2e_s": stats.compaction_s,
    }


def _distribution(
    sk: Sketch, quantiles: Sequence[float], unit: str, cdf_points: int
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "unit": unit,
        "count": sk.count,
        "mean": sk.mean,
        "min": sk.min,
        "max": sk.max,
        **sk.quantiles(quantiles),
    }
    cdf: list[list[float]] = []
    if cdf_points > 0 and sk.count:
        qs = sorted({*(k / cdf_points for k in range(cdf_points + 1)), *_TAIL})
        cdf = [[q, v] for q in qs if (v := sk.quantile(q)) is not None]
    out["cdf"] = cdf
    return out


def _per_agent(stats: FleetStats) -> dict[str, Any]:
    rows = list(stats.agents.values())
    qs = stats.quantiles
    return {
        "agents": len(rows),
        "decode_tps": exact_distribution([v for r in rows if (v := r.decode_tps) is not None], qs),
        "ttft_mean_s": exact_distribution(
            [v for r in rows if (v := r.ttft_mean_s) is not None], qs
        ),
        "turns": exact_distribution([r.turns for r in rows], qs),
        "output_tokens": exact_distribution([r.output_tokens for r in rows], qs),
        "context_tokens": exact_distribution(
            [v for r in rows if (v := r.context_tokens) is not None], qs
        ),
    }


def _goodput(stats: FleetStats, duration: float) -> list[dict[str, Any]]:
    rows = [r for r in stats.agents.values() if r.turns]
    out = []
    for i, slo in enumerate(stats.slos):
        met, tokens = stats.slo_turns[i], stats.slo_tokens[i]
        agents_met = sum(r.slo_met[i] == r.turns for r in rows)
        out.append(
            {
                "name": slo.label,
                "bounds": slo.bounds(),
                "turns": stats.turns,
                "turns_met": met,
                "turn_fraction": met / stats.turns if stats.turns else None,
                "turns_per_s": met / duration if duration > 0 else None,
                "output_tokens_met": tokens,
                "output_tps": tokens / duration if duration > 0 else None,
                "agents": len(rows),
                "agents_met": agents_met,
                "agent_fraction": agents_met / len(rows) if rows else None,
                "agents_per_s": agents_met / duration if duration > 0 else None,
                "failed_bounds": {k: stats.slo_failed_bounds[i][k] for k in slo.bounds()},
            }
        )
    return out


def _throughput(stats: FleetStats, origin: int) -> dict[str, Any]:
    ts = stats.series
    start, width = ts.start_ns, ts.width_ns
    out: dict[str, Any] = {"bucket_s": width / _NS, "t_s": [], "dt_s": []}
    names = ("output_tps", "prompt_tps", "cached_tps", "turns_per_s", "in_flight")
    for key in (*names, "cache_hit_rate", "decode_tps_mean", "errors", "retries"):
        out[key] = []
    out["slo_turns_per_s"] = {s.label: [] for s in stats.slos}
    if start is None:
        return out
    vals = {name: ts.values(name) for name in ts.names}
    # Reported by no turn: null in every bucket, as the fleet's figure is (zeros would
    # read as measured ones).
    unreported = {
        key
        for key, reported in (
            ("prompt_tps", stats.prompt_turns + stats.compaction_prompt_requests),
            ("cached_tps", stats.cache_prompt_tokens + stats.compaction_cache_prompt_tokens),
        )
        if not reported
    }
    # The fleet's wall time runs from its start: the run ends at start + wall time when
    # both are known (a caller's start_ns or the first turn's ready time may be later or
    # earlier than the fleet's start), else at its last turn's end — never before that.
    fleet_start, wall, last = stats.fleet_start_ns, stats.wall_s, stats.last_ns
    end_of_run = fleet_start + round(wall * 1e9) if fleet_start is not None and wall else last
    if end_of_run is not None and last is not None:
        end_of_run = max(end_of_run, last)
    for i in range(len(ts)):
        # A bucket's rate is over the part of it inside the run (the first and last
        # buckets may stick out of it); a bucket wholly outside keeps its full width.
        lo, hi = start + i * width, start + (i + 1) * width
        lo_c = max(lo, origin)
        hi_c = hi if end_of_run is None else min(hi, end_of_run)
        if hi_c <= lo_c:
            lo_c, hi_c = lo, hi
        dt = (hi_c - lo_c) / _NS
        out["t_s"].append((lo_c - origin) / _NS)
        out["dt_s"].append(dt)
        for key, series in zip(
            names,
            ("output_tokens", "prompt_tokens", "cached_tokens", "turns", "in_flight_s"),
            strict=True,
        ):
            out[key].append(None if key in unreported else vals[series][i] / dt)
        denom = vals["cache_prompt_tokens"][i]
        out["cache_hit_rate"].append(vals["cached_tokens"][i] / denom if denom > 0 else None)
        out["errors"].append(round(vals["errors"][i]))
        out["retries"].append(round(vals["retries"][i]))
        n = vals["decode_turns"][i]
        out["decode_tps_mean"].append(vals["decode_tps_sum"][i] / n if n > 0 else None)
        for s in stats.slos:
            out["slo_turns_per_s"][s.label].append(vals[f"slo:{s.label}"][i] / dt)
    return out


def _provenance(stats: FleetStats) -> dict[str, Any]:
    by_src = stats.output_by_source
    reported = stats.prompt_turns
    cache_reported = sum(stats.cached_sources.values())
    return {
        "output_tokens": {
            src: {"turns": n, "tokens": tokens} for src, (n, tokens) in by_src.items()
        },
        "tokens_per_chunk": {
            "exact_turns": stats.exact_chunk_turns,
            "inexact_turns": stats.turns - stats.exact_chunk_turns,
        },
        "prompt_tokens": {
            "reported_turns": reported,
            "reported_tokens": stats.prompt_tokens,
            "estimated_turns": stats.estimated_prompt_turns,
            "estimated_tokens": stats.estimated_prompt_tokens,
            "unknown_turns": stats.turns - reported - stats.estimated_prompt_turns,
        },
        "cached_tokens": {
            "reported_turns": cache_reported,
            "unreported_turns": stats.turns - cache_reported,
            "sources": dict(sorted(stats.cached_sources.items())),
        },
    }
