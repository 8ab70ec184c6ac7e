"""Several runs side by side: :func:`compare_runs`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow.report._canvas import (
    Figure,
    color,
    log_axis,
    new_figure,
    number,
    plain,
    style,
    to_png,
)
from agentflow.report._runs import Run, agent_decode_quantiles, agent_decode_tps
from agentflow.stats._sketch import nearest_rank

__all__ = ["compare_runs"]


def _compare_panels() -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """The comparison's panels: title, unit, [(bar label, value of a run)]."""

    def dist(key: str, q: str, scale: float = 1e3) -> Any:
        def get(r: Run) -> float | None:
            d = r.distribution(key)
            v = d.get(q) if d else None
            return float(v) * scale if isinstance(v, int | float) else None

        return get

    def fleet(key: str, scale: float = 1.0) -> Any:
        def get(r: Run) -> float | None:
            v = r.fleet.get(key)
            return float(v) * scale if isinstance(v, int | float) else None

        return get

    return [
        (
            "latency (ms)",
            "ms",
            [
                ("TTFT p50", dist("ttft_s", "p50")),
                ("TTFT p99", dist("ttft_s", "p99")),
                ("TPOT p50", dist("tpot_s", "p50")),
                ("TPOT p99", dist("tpot_s", "p99")),
                ("ITL p99", dist("itl_s", "p99")),
                ("E2E p50", dist("e2e_s", "p50")),
                ("E2E p99", dist("e2e_s", "p99")),
            ],
        ),
        (
            "per-agent decode (tok/s)",
            "tok/s",
            [
                ("p10", lambda r: _agent_q(r, 0.1)),
                ("p50", lambda r: _agent_q(r, 0.5)),
                ("p90", lambda r: _agent_q(r, 0.9)),
            ],
        ),
        ("fleet output (tok/s)", "tok/s", [("output tok/s", fleet("output_tps"))]),
        ("prefix-cache hit (%)", "%", [("cache hit", fleet("cache_hit_rate", 100))]),
    ]


def _agent_q(run: Run, q: float) -> float | None:
    vs = sorted(agent_decode_tps(run))
    if not vs:  # no agents rows (a bench level's): the per_agent quantile, if it has it
        return agent_decode_quantiles(run).get(q)
    return vs[nearest_rank(q, len(vs))]  # the report's own definition


def compare_runs(runs: Sequence[Run]) -> Figure | None:
    """Two (or more) runs side by side: latency percentiles, per-agent decode speed and
    fleet figures as grouped bars, values printed on the bars."""
    if len(runs) < 2:
        return None
    panels = _compare_panels()
    fig, axes = new_figure(1, 4, size=(15.0, 5.2))
    n = len(runs)
    w = 0.8 / n
    for ax, (title, unit, items) in zip(axes, panels, strict=True):
        for i, run in enumerate(runs):
            vals = [get(run) for _, get in items]
            xs = [k + (i - (n - 1) / 2) * w for k in range(len(items))]
            heights = [v if v is not None else 0.0 for v in vals]
            bars = ax.bar(xs, heights, w, color=color(i), label=plain(run.label))
            for b, v in zip(bars, vals, strict=True):
                ax.annotate(
                    "—" if v is None else number(v),
                    (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    rotation=90,
                )
        ax.set_xticks(range(len(items)), [label for label, _ in items], rotation=30, ha="right")
        if unit == "ms":
            log_axis(ax, "y")
        ax.margins(y=0.25)
        if unit == "%":
            ax.set_ylim(0, 119)
        style(ax, title=title, ylabel=unit)
        ax.legend(fontsize=8)
    names = " vs ".join(r.label for r in runs)
    fig.suptitle(plain(f"Run comparison: {names}"), fontsize=12)
    return Figure(
        "compare",
        "Run comparison, side by side",
        "Grouped bar charts comparing the runs' latency percentiles, per-agent decode "
        "speeds and fleet throughput, one colour per run.",
        "Same figure, one bar per run, values printed on the bars. Latency: lower is "
        "better (log scale). Decode speed per agent and fleet output: higher is better. "
        "Compare runs made at the same time scale (see each run's settings above).",
        to_png(fig),
    )
