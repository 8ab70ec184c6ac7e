"""A measured level's figures: its summary (``docs/bench.md``'s table) from its window's
``agentflow.report/2`` report, and the over-saturation verdict (:class:`Saturation`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentflow.bench._level import Saturation, _Window
    from agentflow.bench._load import Load
    from agentflow.bench._session import BenchRun

__all__ = ["level_summary", "window_length"]


def window_length(duration_s: float, warmup_s: float, ran_out_s: float | None) -> float:
    """Seconds of the measurement window under load: warm-up end → the level's end (a
    concurrency level whose scripts ran out had no load after its last session)."""
    return max(min(duration_s, ran_out_s or duration_s) - warmup_s, 0.0)


def _waiting_at(window: _Window, t_ns: int) -> int:
    """Turns ready at ``t_ns`` that had no output yet."""
    return sum(1 for ready, first in window.waits if ready <= t_ns < first)


def _q(dist: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: dist.get(k) for k in ("mean", *keys)}


def level_summary(
    *,
    load: Load,
    report: Mapping[str, Any],
    run: BenchRun,
    window: _Window,
    planned: int,
    warmup_s: float,
    duration_s: float,
    drained: bool,
    cut: int,
    ran_out_s: float | None,
    saturation: Saturation,
    peak_in_flight: int | None,
    interrupted: bool = False,
) -> dict[str, Any]:
    """The level's entry figures (``docs/bench.md``'s table): from ``report``, its
    window's ``agentflow.report/2``, and from ``run`` and ``window`` what a report does
    not hold — sessions started, the backlog, the time-to-first-token trend.
    ``interrupted``: the level was cancelled ``duration_s`` after its start."""
    fleet = report["fleet"]
    dist = report["distributions"]
    per_agent = report["per_agent"]
    t0 = run.t0
    lo, hi = t0 + warmup_s, t0 + duration_s
    started_in_window = sum(1 for s in run.starts if lo <= s < hi)
    ready_in_window = sum(1 for ready, _ in window.waits if window.lo_ns <= ready < window.hi_ns)
    backlog = _waiting_at(window, window.hi_ns) - _waiting_at(window, window.lo_ns)
    backlog_growth = backlog / ready_in_window if ready_in_window else None
    growth, rise = _ttft_growth(window, saturation.min_samples)
    reasons = []
    if (
        growth is not None
        and growth >= saturation.ttft_growth
        and rise is not None
        and rise >= saturation.min_rise_s
    ):
        reasons.append(f"time to first token grew {growth:.1f}× (+{rise:.2f} s) over the window")
    if backlog_growth is not None and backlog_growth >= saturation.backlog_growth:
        reasons.append(
            f"{backlog} more turns waited for a first token at the end than at the start "
            f"({backlog_growth:.0%} of the turns ready in the window)"
        )
    if not drained and not interrupted:
        reasons.append("turns were still in flight when the drain time ran out")
    starts_all = sum(1 for s in run.starts if s < hi)
    measured = window_length(duration_s, warmup_s, ran_out_s)
    return {
        "load": {
            "mode": load.mode,
            "value": load.value,
            "arrival": load.arrival if load.rate is not None else None,
            "label": load.label,
        },
        # Interrupted in its warm-up: an empty window, at the warm-up's end.
        "window_s": [warmup_s, max(duration_s, warmup_s)],
        "interrupted": interrupted,
        "sessions": {
            "planned": planned,
            "started": len(run.starts),
            "not_started": run.not_started,
            "cut_at_end": cut,
            "ran_out_s": ran_out_s,
            "subagents": run.subagents,
            "in_window": len(window.sessions),
            "drained": drained,
        },
        "requested_rate": load.rate,
        "achieved_rate": starts_all / duration_s if load.open_loop and duration_s else None,
        "window_arrival_rate": started_in_window / measured if measured else None,
        "turns": fleet["turns"],
        "peak_in_flight": peak_in_flight,
        "req_per_s": fleet["turns_per_s"],
        "output_tps": fleet["output_tps"],
        "output_tokens": fleet["output_tokens"],
        "ttft_s": _q(dist["ttft_s"], "p50", "p90", "p99"),
        "tpot_s": _q(dist["tpot_s"], "p50", "p90", "p99"),
        "itl_s": _q(dist["itl_s"], "p50", "p99"),
        "e2e_s": _q(dist["e2e_s"], "p50", "p99"),
        "queue_wait_s": _q(dist["queue_wait_s"], "p50", "p99"),
        "decode_tps_per_agent": _q(per_agent["decode_tps"], "p50", "p99"),
        "decode_tps_per_turn": _q(dist["decode_tps"], "p50", "p99"),
        "goodput": [
            {
                "slo": g["name"],
                "turn_fraction": g["turn_fraction"],
                "turns_per_s": g["turns_per_s"],
                "output_tps": g["output_tps"],
            }
            for g in report["goodput"]
        ],
        "cache_hit_rate": fleet["cache_hit_rate"],
        "prompt_tokens": fleet["prompt_tokens"],
        "cached_tokens": fleet["cached_tokens"],
        "errors": fleet["errors"],
        "statuses": fleet["statuses"],
        "saturation": {
            "ttft_growth": growth,
            "ttft_rise_s": rise,
            "backlog": backlog,
            "backlog_growth": backlog_growth,
            "saturated": bool(reasons),
            "reasons": reasons,
        },
    }


def _ttft_growth(window: _Window, min_samples: int) -> tuple[float | None, float | None]:
    """Median (queue wait + TTFT) of the window's last third over its first third, and
    the difference in seconds; ``None`` with too few turns."""
    pts = window.first_token
    if not pts:
        return None, None
    lo, hi = window.lo_ns, max(r for r, _ in pts)
    third = (hi - lo) / 3
    first = [v for r, v in pts if r < lo + third]
    last = [v for r, v in pts if r >= hi - third]
    if len(first) < min_samples or len(last) < min_samples:
        return None, None
    a, b = statistics.median(first), statistics.median(last)
    return (b / a if a > 0 else None), b - a
