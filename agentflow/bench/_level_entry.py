"""A level's entry in the bench report, assembled from its repeated runs.

Every figure of the runs' summaries is its mean over the repeats, and those of
:data:`_CI_FIGURES` have a 95 % confidence interval (:func:`confidence_interval`,
Student's t) under ``ci95``; over-saturated when most runs were (for those runs'
reasons), or (fixed-concurrency levels) when throughput stopped growing over the previous
level while latency rose (:func:`_plateau`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow.bench._bench_config import BenchConfig
from agentflow.bench._level import LevelResult
from agentflow.bench._load import Load

__all__ = ["confidence_interval", "every_session_failed", "level_failed"]

#: Figures that get a confidence interval over repeats: (key in the summary, sub-key).
_CI_FIGURES: tuple[tuple[str, str | None], ...] = (
    ("output_tps", None),
    ("req_per_s", None),
    ("achieved_rate", None),
    ("ttft_s", "p50"),
    ("ttft_s", "p99"),
    ("tpot_s", "p50"),
    ("tpot_s", "p99"),
    ("decode_tps_per_agent", "p50"),
    ("decode_tps_per_agent", "p99"),
    ("cache_hit_rate", None),
)


# ---- statistics over repeats ----------------------------------------------------------

#: Two-sided 95 % Student-t quantiles by degrees of freedom (1–30); 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
    2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
    2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def confidence_interval(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean and two-sided 95 % confidence interval (Student's t) of repeated runs'
    figures: ``{"n", "mean", "stdev", "low", "high", "half_width"}``; with fewer than
    two values the interval is ``None``."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "stdev": None, "low": None, "high": None, "half_width": None}
    mean = statistics.fmean(values)
    if n < 2:
        return {"n": 1, "mean": mean, "stdev": None, "low": None, "high": None, "half_width": None}
    sd = statistics.stdev(values)
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    half = t * sd / math.sqrt(n)
    return {
        "n": n,
        "mean": mean,
        "stdev": sd,
        "low": mean - half,
        "high": mean + half,
        "half_width": half,
    }


def _figure(summary: Mapping[str, Any], key: str, sub: str | None) -> float | None:
    value = summary.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _level_entry(load: Load, runs: list[LevelResult]) -> dict[str, Any]:
    """One level: each figure of its runs' summaries the mean over the repeats
    (:func:`_mean`), with an interval under ``ci95`` for the main ones; over-saturated
    when most runs were, for the reasons of the runs that were."""
    summaries = [r.summary for r in runs]
    entry: dict[str, Any] = _mean(summaries)
    ci: dict[str, Any] = {}
    for key, sub in _CI_FIGURES:
        values = [v for s in summaries if (v := _figure(s, key, sub)) is not None]
        ci[key if sub is None else f"{key}.{sub}"] = confidence_interval(values)
    entry["load"] = summaries[0]["load"]
    entry["interrupted"] = any(s.get("interrupted") for s in summaries)
    entry["sessions"]["drained"] = all(s["sessions"]["drained"] for s in summaries)
    entry["saturation"] = _saturation(summaries, entry["saturation"])
    entry["ci95"] = ci
    from agentflow.demo.summary import failure_lines

    entry["failures"] = failure_lines(s for r in runs if r.result for s in r.result.sessions)
    entry["repeats"] = [
        {
            "seed_offset": i,
            **{k: v for k, v in s.items() if k != "report"},
            "report": _slim(r.report),
        }
        for i, (s, r) in enumerate(zip(summaries, runs, strict=True))
    ]
    return entry


def _mean(values: Sequence[Any]) -> Any:
    """The mean of one figure over the repeats, figure by figure inside objects and lists
    (a distribution's quantiles, the goodput of each SLO): numbers (counts too) the mean
    of those given (``None`` when none is; an int when it is a whole number); anything
    else — a name, a flag — the first run's."""
    first = values[0]
    if len(values) == 1:
        return first
    if isinstance(first, Mapping):
        return {k: _mean([v.get(k) if isinstance(v, Mapping) else None for v in values])
                for k in first}  # fmt: skip
    if isinstance(first, list):
        same = all(isinstance(v, list) and len(v) == len(first) for v in values)
        return [_mean([v[i] for v in values]) for i in range(len(first))] if same else first
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if isinstance(first, bool) or (first is not None and not numbers):
        return first
    if not numbers:
        return None
    mean = statistics.fmean(numbers)
    whole = all(isinstance(v, int) for v in numbers) and mean.is_integer()
    return int(mean) if whole else mean


def _saturation(summaries: Sequence[Mapping[str, Any]], means: dict[str, Any]) -> dict[str, Any]:
    """The level's verdict: over-saturated when most runs were; its reasons those of the
    runs that were (each named by its repeat), none when it is not; its figures (TTFT
    growth, backlog) the means over the runs."""
    verdicts = [bool(s["saturation"]["saturated"]) for s in summaries]
    saturated = sum(verdicts) * 2 > len(verdicts)
    if len(summaries) == 1:
        reasons = list(summaries[0]["saturation"]["reasons"])
    elif saturated:
        reasons = [
            f"repeat {i}: {reason}"
            for i, s in enumerate(summaries)
            if s["saturation"]["saturated"]
            for reason in s["saturation"]["reasons"]
        ]
    else:
        reasons = []
    return {**means, "saturated": saturated, "reasons": reasons}


def level_failed(entry: Mapping[str, Any]) -> bool:
    """Whether a session of the level failed in any of its runs: ended in error or at
    ``max_turns`` in the window, or failed at any time of the run (the fleet's
    ``errors.session`` counts failures in the warm-up too)."""
    runs = entry.get("repeats") or [entry]
    return any(
        s["statuses"].get("error", 0) + s["statuses"].get("max_turns", 0) + s["errors"]["session"]
        for s in runs
    )


def every_session_failed(runs: Sequence[LevelResult]) -> bool:
    """Whether every session of the level's runs failed — at least one, none completed,
    none still running when the level ended (a server that is down, a wrong model name:
    a sweep goes no further). A level whose sessions were cut at its end may have
    served them: one error beside long sessions still running stops nothing."""
    sessions = [s for r in runs if r.result for s in r.result.sessions]
    return bool(sessions) and not any(s.ok or s.status == "cancelled" for s in sessions)


#: The quantiles of each session's decode speed a slimmed report adds to
#: ``per_agent.decode_tps``: every 5 %, what ``agentflow report`` draws its per-agent
#: decode histogram and comparison bars from when the rows are gone.
_DECODE_QUANTILES = tuple(k / 20 for k in range(1, 20))


def _slim(report: dict[str, Any]) -> dict[str, Any]:
    """A level's ``agentflow.report/2`` with its one-row-per-session table emptied (a
    level can run thousands of sessions; ``per_agent`` keeps their distributions, and
    its ``decode_tps`` gains p5 … p95 from the rows: the figures drawn from them)."""
    from agentflow.stats._report import exact_distribution

    rows = report.get("agents") or []
    per_agent = report.get("per_agent")
    if not rows or not isinstance(per_agent, Mapping):
        return {**report, "agents": []}
    values = [
        float(v)
        for row in rows
        if isinstance(d := row.get("decode_tps"), Mapping)
        and isinstance(v := d.get("mean"), int | float)
    ]
    quantiles = exact_distribution(values, _DECODE_QUANTILES)
    decode = {**quantiles, **per_agent.get("decode_tps", {})}  # its own figures first
    return {**report, "agents": [], "per_agent": {**per_agent, "decode_tps": decode}}


def _plateau(config: BenchConfig, entry: dict[str, Any], previous: dict[str, Any] | None) -> None:
    """Fixed-concurrency levels: a throughput plateau with rising latency is saturation —
    against a previous level of fewer sessions (the same load again, or less, is no
    plateau: its throughput need not grow), output tok/s growing by less than
    ``min_gain`` of the sessions' growth (scaling efficiency)."""
    if previous is None or entry["load"]["mode"] != "concurrency":
        return
    if (
        previous["load"]["mode"] != "concurrency"
        or entry["load"]["value"] <= previous["load"]["value"]
    ):
        return
    # Against the load's own step: +5 % sessions can add at most ~5 % output, so a flat
    # bar of a few percent would call every small step a plateau.
    min_gain = config.sweep.min_gain if config.sweep is not None else 0.25
    tps, prev_tps = entry.get("output_tps"), previous.get("output_tps")
    ttft, prev_ttft = _figure(entry, "ttft_s", "p50"), _figure(previous, "ttft_s", "p50")
    if not tps or not prev_tps or ttft is None or prev_ttft is None:
        return
    gain = tps / prev_tps - 1
    load_gain = entry["load"]["value"] / previous["load"]["value"] - 1
    if gain < min_gain * load_gain and ttft > prev_ttft:
        sat = entry["saturation"]
        sat["saturated"] = True
        sat["reasons"] = [
            *sat.get("reasons", []),
            f"output tok/s grew {gain:+.1%} for {load_gain:+.1%} sessions over the previous "
            f"level (under {min_gain:.0%} of linear scaling) while TTFT p50 rose",
        ]


def note_lag(entry: dict[str, Any], reports: Sequence[Mapping[str, Any]], label: str) -> None:
    """An over-saturated level (by any rule: its runs' reasons, or a throughput plateau)
    whose client lagged (``lag_warning``'s test on a repeat's report) says so in its
    reasons: its growing latencies may be the client's, not the server's."""
    reasons = entry["saturation"].get("reasons")
    if not entry["saturation"].get("saturated") or not reasons:
        return
    from agentflow.report._html import lag_p99_s, lag_warning
    from agentflow.report._runs import Run

    lagging = [r for r in reports if lag_warning(Run(label, dict(r))) is not None]
    if not lagging:
        return
    p99 = max(lag_p99_s(r["run"]["loop_lag"]) or 0.0 for r in lagging)
    stamped = lagging[0]["run"].get("reads_stamped_by", "event loop")
    reasons.append(
        f"the client's event loop lagged {p99 * 1e3:,.2f} ms at p99 (reads stamped by the "
        f"{stamped}): the client, not only the server, may be saturated"
    )
