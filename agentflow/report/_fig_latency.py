"""Latency and speed figures: CDFs, per-agent decode speed, client vs server.

Every figure takes runs (``agentflow.report/2`` documents) and returns a
:class:`~agentflow.report.Figure`, or ``None`` when the runs hold nothing it could draw.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow.report._canvas import (
    SERVER_COLOR,
    Figure,
    color,
    empty_note,
    log_axis,
    new_figure,
    number,
    plain,
    style,
    to_png,
)
from agentflow.report._runs import Run, agent_decode_quantiles, agent_decode_tps
from agentflow.stats._sketch import nearest_rank

__all__ = ["client_vs_server", "decode_distribution", "latency_cdf"]

#: The CDF panels: report key, panel title.
CDF_PANELS = (
    ("ttft_s", "TTFT — time to first token"),
    ("tpot_s", "TPOT — time per output token"),
    ("itl_s", "ITL — gap between chunks"),
    ("e2e_s", "E2E — request latency"),
)


def _scale_note(runs: Sequence[Run]) -> str:
    scales = {r.time_scale for r in runs}
    if scales == {1.0}:
        return ""
    s = ", ".join(f"{x:g}" for x in sorted(scales))
    return (
        f" The simulator ran ×{s} slower than the deployment it models: times are as "
        "measured; divide them by the time scale for the deployment's."
    )


def server_cdf_points(h: Mapping[str, Any]) -> list[tuple[float, float]]:
    """A server histogram's ``(bound in ms, fraction ≤ bound)`` points, without the
    empty buckets before the first observation and the full ones after the last."""
    total = h.get("count") or 0
    pts = [(float(b) * 1e3, float(c) / total) for b, c in h.get("buckets") or [] if b > 0]
    if not pts or total <= 0:
        return []
    first = next((i for i, (_, f) in enumerate(pts) if f > 0), len(pts))
    last = next((i for i, (_, f) in enumerate(pts) if f >= 1.0), len(pts) - 1)
    return pts[max(0, first - 1) : last + 1]


def latency_cdf(runs: Sequence[Run]) -> Figure:
    """TTFT, TPOT, ITL and E2E: each run's CDF (from its sketch quantiles), with the
    server's histogram as steps when the report has a ``server`` section."""
    fig, axes = new_figure(2, 2, size=(11.0, 7.5))
    server_drawn = False
    for ax, (key, title) in zip(axes, CDF_PANELS, strict=True):
        drawn = False
        for i, run in enumerate(runs):
            d = run.distribution(key)
            if d is None or not d.get("cdf"):
                continue
            pts = [(v * 1e3, q) for q, v in d["cdf"] if v is not None and v > 0]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, color=color(i), lw=1.8, label=plain(f"{run.label} (n={d['count']:,})"))
            for q, marker in ((0.5, "o"), (0.99, "^")):
                v = d.get("p50" if q == 0.5 else "p99")
                if isinstance(v, int | float) and v > 0:
                    ax.plot([v * 1e3], [q], marker=marker, color=color(i), ms=6)
            drawn = True
        for run in runs:
            server = run.server
            h = ((server or {}).get("latency") or {}).get(key)
            if not h or not h.get("buckets") or not h.get("count"):
                continue
            pts = server_cdf_points(h)
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(
                    xs,
                    ys,
                    color=SERVER_COLOR,
                    ls="--",
                    lw=1.0,
                    marker="s",
                    ms=4,
                    label=plain(f"server /metrics, bucket edges ({run.label})"),
                )
                server_drawn = True
            break
        if not drawn:
            empty_note(ax, f"{title}: not measured")
            ax.set_title(title, fontsize=11)
            continue
        log_axis(ax)
        ax.set_ylim(0, 1.02)
        for q in (0.5, 0.9, 0.99):
            ax.axhline(q, color="#999999", lw=0.6, ls=":")
        style(ax, title=title, xlabel="milliseconds (log scale)", ylabel="fraction of samples ≤ x")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Latency CDFs: TTFT, TPOT, ITL, E2E", fontsize=13)
    caption = (
        "Each curve is the fraction of turns (ITL: of chunk gaps) at or below a latency; "
        "further right is slower, a long flat tail is a slow minority. Dots mark p50, "
        "triangles p99; dotted lines are p50, p90 and p99. Curves come from each report's "
        "sketch quantiles (within ±1 % of the exact values)."
        + (
            " Grey squares: the server's own histogram from /metrics — the share of requests "
            "at or below each bucket edge (nothing is known between edges)."
            if server_drawn
            else ""
        )
        + _scale_note(runs)
    )
    return Figure(
        "latency_cdf",
        "Latency CDFs: TTFT, TPOT, ITL, E2E",
        "Four cumulative distribution plots of time to first token, time per output token, "
        "inter-chunk latency and end-to-end latency in milliseconds, one curve per run.",
        caption,
        to_png(fig),
    )


def decode_distribution(runs: Sequence[Run]) -> Figure:
    """A histogram of each agent's decode speed (tok/s), one per run, medians marked."""
    fig, (ax,) = new_figure(size=(10.0, 5.0))
    values = [agent_decode_tps(run) for run in runs]
    summarized = []  # runs without agents rows (a bench level): drawn from their quantiles
    medians: dict[int, float] = {}
    for i, run in enumerate(runs):
        if not values[i] and (qs := agent_decode_quantiles(run)):
            count = (run.report.get("per_agent") or {}).get("decode_tps", {}).get("count", 0)
            values[i] = _from_quantiles(qs, int(count))
            if 0.5 in qs:
                medians[i] = qs[0.5]
            summarized.append(run.label)
    everything = [v for vs in values for v in vs if v > 0]
    if not everything:
        empty_note(ax, "no agent decoded two or more tokens: no decode speed to show")
    else:
        lo, hi = min(everything), max(everything)
        if hi <= lo:
            lo, hi = lo * 0.9, hi * 1.1
        wide = hi / lo > 4  # runs far apart: log-spaced bins keep each one readable
        bins = (
            [lo * (hi / lo) ** (k / 40) for k in range(41)]
            if wide
            else [lo + (hi - lo) * k / 30 for k in range(31)]
        )
        for i, (run, vs) in enumerate(zip(runs, values, strict=True)):
            if not vs:
                continue
            vs_sorted = sorted(vs)
            med = medians.get(i, vs_sorted[nearest_rank(0.5, len(vs_sorted))])
            ax.hist(
                vs,
                bins=bins,
                color=color(i),
                alpha=0.45,
                label=plain(f"{run.label}: {len(vs):,} agents, median {med:,.0f} tok/s"),
            )
            ax.hist(vs, bins=bins, color=color(i), histtype="step", lw=1.5)
            ax.axvline(med, color=color(i), ls="--", lw=1.5)
        style(
            ax,
            xlabel="decode tok/s of one agent (output tokens after the first / their time)",
            ylabel="agents",
        )
        if wide:
            log_axis(ax)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=9)
        scales = {r.time_scale for r in runs}
        if len(scales) == 1 and (s := scales.pop()) != 1.0:
            sec = ax.secondary_xaxis("top", functions=(lambda x: x * s, lambda x: x / s))
            sec.set_xlabel(f"at the modelled deployment's speed (×{s:g})")
    ax.set_title("Per-agent decode speed (tok/s)", fontsize=12)
    return Figure(
        "decode_tps",
        "Per-agent decode speed (tok/s)",
        "Histogram of the decode speed of each agent in tokens per second, one colour per "
        "run, with each run's median as a dashed line.",
        "Each agent (or session) counts once: its output tokens after the first divided by "
        "the time they took, over all its turns. A wide spread means agents were served "
        "unevenly; a left tail is agents that decoded slowly (long contexts, big batches)."
        + (
            f" {', '.join(summarized)}: the report keeps no row per agent (a bench level's), "
            "so its histogram is drawn from the quantiles of per_agent.decode_tps (min, "
            "p5 … p95, p99, max where given), one value per agent spread between them."
            if summarized
            else ""
        )
        + _scale_note(runs),
        to_png(fig),
    )


def _from_quantiles(qs: Mapping[float, float], n: int) -> list[float]:
    """``n`` values whose quantiles are ``qs`` (quantile → value, with 0 and 1): the
    k-th is the quantile function, linear between the given points, at (k + ½)/n."""
    points = sorted(qs.items())
    out = []
    for k in range(n):
        q = (k + 0.5) / n
        for (q0, v0), (q1, v1) in itertools.pairwise(points):
            if q0 <= q <= q1:
                out.append(v0 if q1 == q0 else v0 + (v1 - v0) * (q - q0) / (q1 - q0))
                break
    return out


def _summary(d: Mapping[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    if not d:
        return None, None, None
    vals = [d.get(k) for k in ("mean", "p50", "p99")]
    m, p50, p99 = (float(v) * 1e3 if isinstance(v, int | float) else None for v in vals)
    return m, p50, p99


def client_vs_server(runs: Sequence[Run]) -> Figure | None:
    """Mean, p50 and p99 of each latency as the client measured it and as the server's
    histograms say, for the first run with a ``server`` section."""
    run = next((r for r in runs if r.server and r.server.get("latency")), None)
    if run is None or run.server is None:
        return None
    latency = run.server["latency"]
    keys = [k for k, _ in CDF_PANELS if k in latency and run.distribution(k) is not None]
    if not keys:
        return None
    fig, axes = new_figure(1, len(keys), size=(3.2 * len(keys) + 1.5, 4.8))
    for ax, key in zip(axes, keys, strict=True):
        client = _summary(run.distribution(key))
        server = _summary(latency[key])
        xs = range(3)
        w = 0.38
        for off, vals, name, col in (
            (-w / 2, client, "client", color(0)),
            (w / 2, server, "server", SERVER_COLOR),
        ):
            heights = [v if v is not None else math.nan for v in vals]
            hatch = [None, "//", "//"] if name == "server" else [None, None, None]
            bars = ax.bar([x + off for x in xs], heights, w, label=name, color=col)
            for b, v, h in zip(bars, vals, hatch, strict=True):
                if h:
                    b.set_hatch(h)
                    b.set_edgecolor("white")
                if v is not None:
                    ax.annotate(
                        number(v),
                        (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                    )
        ax.set_xticks(list(xs), ["mean", "p50", "p99"])
        style(ax, title=dict(CDF_PANELS)[key].split(" —")[0], ylabel="ms")
        ax.legend(fontsize=8)
    src = run.server.get("source") or {}
    fig.suptitle(
        plain(
            f"Client vs server latency ({run.label}; server: {src.get('dialect', '?')} /metrics)"
        ),
        fontsize=12,
    )
    return Figure(
        "client_vs_server",
        "Client vs server latency",
        "Bar charts of mean, p50 and p99 latency in milliseconds as measured by agentflow "
        "and as reported by the server's /metrics histograms.",
        "The client's figures include what the server cannot see: the network, HTTP "
        "handling, and the client's own event loop; so client ≥ server is expected and the "
        "gap is that overhead. Server quantiles are interpolated inside histogram buckets, "
        "so they are only as fine as the buckets (hatched bars); means are exact (sum / count).",
        to_png(fig),
    )
