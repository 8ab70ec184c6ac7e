"""The server's view of a run, from two scrapes of its ``/metrics``, beside the client's.

Servers name the same figures differently; a :class:`Dialect` maps each to canonical
keys (``prompt_tokens``, ``cache_hits``, ``ttft_s``…). Known: vLLM (``vllm:``, the v1
names and the older ``gpu_``-prefixed cache ones), SGLang (``sglang:``) and llama.cpp's
server (``llamacpp:``, which has counters but no latency histograms). The agentflow
simulator exports vLLM's names in *engine* seconds plus ``agentflow_sim:time_scale``;
its times are multiplied by that scale so that they compare with the client's.

:func:`server_section` turns a *before* and an *after* scrape (and, optionally, gauge
samples taken in between by :class:`~agentflow.report.ServerWatch`) into the report's
``server`` section (``docs/report-server-section.md``): counter deltas, histogram
means and interpolated quantiles, gauges over time, and a client-vs-server table
(``report/_server_compare.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from agentflow.report._dialects import DIALECTS, MEAN_GAUGES, Dialect
from agentflow.report._finite import leave_out_nonfinite
from agentflow.report._prom import HistogramData, MetricsSnapshot
from agentflow.report._server_compare import comparison, decode_tps

__all__ = [
    "GaugeSample",
    "detect_dialect",
    "server_section",
    "server_section_schema",
    "went_down",
]

#: The version of the ``server`` section's shape.
SERVER_SECTION_VERSION = 1

_TIME_SCALE = "agentflow_sim:time_scale"


def server_section_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the ``server`` section (``server.schema.json``)."""
    text = resources.files("agentflow.report").joinpath("server.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def detect_dialect(snap: MetricsSnapshot) -> Dialect | None:
    """The dialect whose names ``snap`` uses most, or ``None``."""
    names = snap.names | set(snap.types)
    best, hits = None, 0
    for d in DIALECTS.values():
        n = sum(1 for name in names if name.startswith(d.prefix))
        if n > hits:
            best, hits = d, n
    return best


@dataclass(frozen=True, slots=True)
class GaugeSample:
    """Values read in one scrape during the run, by canonical key (gauges and counters)."""

    t_ns: int
    values: dict[str, float]


def counter_value(snap: MetricsSnapshot, names: Sequence[str]) -> float | None:
    """The sum of counters ``names`` in ``snap``; ``None`` if one is missing."""
    total = 0.0
    for n in names:
        v = snap.counter(n)
        if v is None:
            return None
        total += v
    return total


def sample_names(snap: MetricsSnapshot, dialect: Dialect) -> dict[str, tuple[str, ...]]:
    """Canonical key → the *sample* names to read in a quick scan (gauges, and the
    counters a per-interval rate needs)."""
    resolved = dialect.resolve(snap)
    out: dict[str, tuple[str, ...]] = {}
    for key in ("kv_cache_usage", "running", "waiting"):
        if key in resolved:
            out[key] = resolved[key]
    for key in ("cache_hits", "cache_queries", "generation_tokens"):
        if key in resolved:
            out[key] = tuple(
                f"{n}_total" if f"{n}_total" in snap.samples else n for n in resolved[key]
            )
    return out


def server_section(
    before: MetricsSnapshot,
    after: MetricsSnapshot,
    *,
    samples: Sequence[GaugeSample] = (),
    client: Mapping[str, Any] | None = None,
    url: str | None = None,
    origin_ns: int | None = None,
    quantiles: Sequence[float] = (0.5, 0.9, 0.99),
) -> dict[str, Any]:
    """The report's ``server`` section (``docs/report-server-section.md``).

    Args:
        before: the scrape taken just before the run.
        after: the scrape taken just after it.
        samples: gauge samples taken during the run (:class:`ServerWatch`).
        client: the client's ``agentflow.report/2`` report, for the comparison table.
        url: where the metrics were scraped.
        origin_ns: time 0 of ``series.t_s`` on the scrapes' clock (the client report's
            origin, to line the series up with the client's); default: ``before``.
        quantiles: the quantiles estimated from each histogram.
    """
    dialect = detect_dialect(after)
    scale = after.value(_TIME_SCALE)
    scale = scale if scale is not None and 0 < scale < math.inf else 1.0
    counters, latency, reset = _differences(before, after, dialect, quantiles, scale)
    hits, queries = counters.get("cache_hits"), counters.get("cache_queries")
    origin = before.t_ns if origin_ns is None else origin_ns
    section: dict[str, Any] = {
        "version": SERVER_SECTION_VERSION,
        "source": {
            "url": url,
            "dialect": dialect.name if dialect else "unknown",
            "time_scale": scale,
            "scrapes": 2 + len(samples),
            "before_s": (before.t_ns - origin) / 1e9,
            "after_s": (after.t_ns - origin) / 1e9,
        },
        "counters": counters,
        "cache_hit_rate": hits / queries if hits is not None and queries else None,
        "decode_tps": decode_tps(counters, client),
        "latency": latency,
        "series": _series(before, after, samples, dialect, origin),
    }
    nonfinite = leave_out_nonfinite(section)
    section["comparison"] = comparison(section, client) if client is not None else []
    section["notes"] = _notes(section, dialect)
    if nonfinite:
        section["notes"].append(
            "The server's metrics had values that are not numbers (NaN or ±Inf); these "
            f"figures are left out (null): {', '.join(nonfinite)}."
        )
    if reset:
        section["notes"].append(
            "The server's metrics went down between the scrapes (it restarted during the "
            f"run?): {', '.join(reset)} left out."
        )
    return section


def went_down(before: MetricsSnapshot, after: MetricsSnapshot) -> list[str]:
    """The counters and histograms (canonical keys) that went down from ``before`` to
    ``after``: the server restarted between the scrapes, or the two are swapped.
    :func:`server_section` leaves them out; ``agentflow report --server-metrics`` refuses
    such a pair of files."""
    return _differences(before, after, detect_dialect(after), (), 1.0)[2]


def _differences(
    before: MetricsSnapshot,
    after: MetricsSnapshot,
    dialect: Dialect | None,
    quantiles: Sequence[float],
    scale: float,
) -> tuple[dict[str, float | None], dict[str, Any], list[str]]:
    """Counters and histograms, after − before; and the keys of those that went down.

    A counter only grows while the server runs: one that went down (a restart between
    the scrapes) has no meaningful difference, and is left out (``None``) rather than
    reported as a negative count; a histogram likewise (or one whose buckets changed)."""
    counters: dict[str, float | None] = {}
    latency: dict[str, Any] = {}
    reset: list[str] = []
    if dialect is None:
        return counters, latency, reset
    resolved = dialect.resolve(after)
    for key in dialect.counters:
        names = resolved.get(key)
        a = counter_value(after, names) if names else None
        b = counter_value(before, names) if names else None
        counters[key] = None if a is None else a - (b or 0.0)
        if a is not None and b is not None and a < b:
            counters[key] = None
            reset.append(key)
    for key in dialect.histograms:
        names = resolved.get(key)
        h_after = after.histogram(names[0]) if names else None
        if not names or h_after is None:
            continue
        try:
            h = h_after.delta(before.histogram(names[0]))
        except ValueError:  # its buckets changed: another server, or a restart
            reset.append(key)
            continue
        if h.count < 0 or any(c < 0 for c in h.cumulative):
            reset.append(key)
            continue
        latency[key] = _hist_summary(names[0], h.scaled(scale), quantiles)
    return counters, latency, reset


def _hist_summary(metric: str, h: HistogramData, quantiles: Sequence[float]) -> dict[str, Any]:
    from agentflow.stats import quantile_name

    out: dict[str, Any] = {"metric": metric, "count": h.count, "mean": h.mean}
    for q in quantiles:
        out[quantile_name(q)] = h.quantile(q)
    out["buckets"] = [[b, c] for b, c in zip(h.bounds, h.cumulative, strict=True) if b != _INF]
    return out


_INF = float("inf")


def _series(
    before: MetricsSnapshot,
    after: MetricsSnapshot,
    samples: Sequence[GaugeSample],
    dialect: Dialect | None,
    origin: int,
) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {
        k: []
        for k in ("t_s", "kv_cache_usage", "running", "waiting", "cache_hit_rate", "generation_tps")
    }
    if dialect is None:
        return out
    points = [_point(before, dialect), *samples, _point(after, dialect)]
    prev: GaugeSample | None = None
    for p in points:
        out["t_s"].append((p.t_ns - origin) / 1e9)
        for key in ("kv_cache_usage", "running", "waiting"):
            out[key].append(p.values.get(key))
        rate: float | None = None
        tps: float | None = None
        if prev is not None:
            dq = _diff(p, prev, "cache_queries")
            dh = _diff(p, prev, "cache_hits")
            rate = dh / dq if dh is not None and dq else None
            dg = _diff(p, prev, "generation_tokens")
            dt = (p.t_ns - prev.t_ns) / 1e9
            tps = dg / dt if dg is not None and dt > 0 else None
        out["cache_hit_rate"].append(rate)
        out["generation_tps"].append(tps)
        prev = p
    return out


def _diff(a: GaugeSample, b: GaugeSample, key: str) -> float | None:
    """How much counter ``key`` grew from ``b`` to ``a``; ``None`` unknown, or when it
    went down (the server restarted between them)."""
    x, y = a.values.get(key), b.values.get(key)
    return None if x is None or y is None or x < y else x - y


def _point(snap: MetricsSnapshot, dialect: Dialect) -> GaugeSample:
    """The values a quick scan would have read, from a full scrape."""
    values: dict[str, float] = {}
    for key, names in sample_names(snap, dialect).items():
        vs = [snap.value(n, mean=key in MEAN_GAUGES) for n in names]
        if all(v is not None for v in vs):
            values[key] = sum(v for v in vs if v is not None)
    return GaugeSample(snap.t_ns, values)


def _notes(section: Mapping[str, Any], dialect: Dialect | None) -> list[str]:
    notes = [
        "Counters and histograms are differences between the scrapes before and after the "
        "run: requests from other clients in that window are counted too.",
    ]
    if section["latency"]:
        notes.append(
            "Server quantiles are interpolated inside histogram buckets (as Prometheus' "
            "histogram_quantile): each is known only to within its bucket's width."
        )
    scale = section["source"]["time_scale"]
    if scale != 1.0:
        notes.append(
            f"The simulator reports engine seconds; its times are multiplied by its time "
            f"scale ({scale:g}) to compare with the client's wall seconds."
        )
    if dialect is None:
        notes.append("No known metric names (vllm:, sglang:, llamacpp:) were found.")
    elif dialect.name == "llamacpp":
        notes.append(
            "llama.cpp exports no latency histograms; its decode speed is (tokens predicted "
            "− requests) / seconds spent predicting, over every slot: it times each request "
            "from its first token to its last, as the client's E2E − TTFT. It counts no "
            "requests: the client's turns and compaction requests are used (a request is "
            "counted when it finishes; an attempt cut off, as a retried one, is not), so "
            "requests from other clients on the server in the window bias it up."
        )
        notes.append(
            "llama.cpp adds a request's tokens to its counters only when the request ends: "
            "series.generation_tps reads 0 between scrapes in which requests were decoding "
            "but none ended, and spikes when they end (the client's throughput series "
            "spreads each turn's tokens over its decode instead)."
        )
        if section["decode_tps"] is None and section["counters"].get("generation_seconds"):
            notes.append(
                "decode_tps is null: it needs the number of requests, from the client's report."
            )
    return notes
