"""Load figures: interactivity vs throughput, throughput and cache over time, context growth."""

from __future__ import annotations

from collections.abc import Sequence

from agentflow.report._canvas import (
    SERVER_COLOR,
    Figure,
    bucket_steps,
    color,
    empty_note,
    gaps,
    new_figure,
    plain,
    style,
    to_png,
)
from agentflow.report._runs import Run, run_samples

__all__ = ["cache_kv_over_time", "context_growth", "interactivity", "throughput"]


def _gpus(run: Run, gpus: float | None) -> float | None:
    g = gpus if gpus is not None else run.run.get("gpus")
    return float(g) if isinstance(g, int | float) and g > 0 else None


def interactivity(runs: Sequence[Run], *, gpus: float | None = None) -> Figure:
    """Interactivity (decode tok/s per agent) against throughput (output tok/s), as
    InferenceX draws it: one large point per run, small points per time bucket."""
    fig, (ax,) = new_figure(size=(9.5, 6.0))
    per_gpu = all(_gpus(r, gpus) for r in runs)
    points: list[tuple[float, float, str]] = []
    any_drawn = False
    for i, run in enumerate(runs):
        div = _gpus(run, gpus) if per_gpu else None
        div = div or 1.0
        tp = run.report.get("throughput") or {}
        width = float(tp.get("bucket_s") or 0.0)
        bx, by = [], []
        for x, y, dt in zip(
            tp.get("output_tps") or [],
            tp.get("decode_tps_mean") or [],
            tp.get("dt_s") or [],
            strict=False,
        ):
            if x and y and dt and dt >= 0.5 * width:
                bx.append(x / div)
                by.append(y)
        if bx:
            ax.scatter(
                bx,
                by,
                s=14,
                color=color(i),
                alpha=0.35,
                lw=0,
                label=plain(f"{run.label}: each {width:g} s of the run"),
            )
            any_drawn = True
        x = run.fleet.get("output_tps")
        y = ((run.report.get("per_agent") or {}).get("decode_tps") or {}).get("p50")
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0:
            peak = run.fleet.get("peak_in_flight")
            ax.scatter(
                [x / div],
                [y],
                s=90,
                color=color(i),
                edgecolor="black",
                zorder=3,
                label=plain(f"{run.label}: whole run"),
            )
            note = run.label + (f" ({peak} in flight)" if peak else "")
            ax.annotate(
                plain(note), (x / div, y), textcoords="offset points", xytext=(6, 6), fontsize=8
            )
            points.append((x / div, y, run.label))
            any_drawn = True
    same_scale = len({r.time_scale for r in runs}) == 1
    if len(points) >= 2 and same_scale:
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], color="black", lw=1, alpha=0.6)
    if not any_drawn:
        empty_note(ax, "no throughput or decode speed in the reports")
    else:
        unit = "per GPU" if per_gpu else "fleet"
        style(
            ax,
            xlabel=f"throughput: output tok/s ({unit})",
            ylabel="interactivity: decode tok/s per agent",
        )
        # Headroom above and right of the highest point, so no marker sits on the frame.
        ax.set_xlim(0, ax.get_xlim()[1] * 1.1)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
        ax.legend(fontsize=8, loc="best")
    ax.set_title("Interactivity vs throughput", fontsize=12)
    return Figure(
        "interactivity",
        "Interactivity vs throughput",
        "Scatter plot of decode tokens per second per agent against total output tokens "
        "per second, one large point per run and small points per time bucket.",
        "Up is faster for each user, right is more work done by the deployment. Serving "
        "more agents at once moves a run right and down: the curve is the trade-off. Large "
        "points: the whole run (x = output tokens / duration; y = median agent's decode "
        "speed), joined across runs; small points: each time bucket of a run (x = its "
        "output rate; y = mean decode speed of the turns that ended in it) — a run's ramp "
        "up and its tail trace the same curve at other loads."
        + ("" if per_gpu else " Pass --gpus N (or run.gpus) to divide throughput per GPU.")
        + (
            ""
            if same_scale
            else " The runs were made at different time scales: their points are not joined."
        ),
        to_png(fig),
    )


def throughput(runs: Sequence[Run]) -> Figure:
    """Output tok/s and requests in flight over time (and the server's generation rate)."""
    fig, (ax,) = new_figure(size=(10.0, 5.0))
    ax2 = ax.twinx()
    drawn = False
    for i, run in enumerate(runs):
        tp = run.report.get("throughput") or {}
        t = tp.get("t_s") or []
        if not t:
            continue
        dt = tp.get("dt_s") or []
        ax.step(
            *bucket_steps(t, dt, tp.get("output_tps") or []),
            where="post",
            color=color(i),
            lw=1.8,
            label=plain(f"{run.label}: output tok/s"),
        )
        ax2.step(
            *bucket_steps(t, dt, tp.get("in_flight") or []),
            where="post",
            color=color(i),
            lw=1,
            ls=":",
            label=plain(f"{run.label}: requests in flight"),
        )
        series = (run.server or {}).get("series") or {}
        xs, ys = gaps(series.get("t_s") or [], series.get("generation_tps") or [])
        if any(y == y for y in ys):
            ax.step(
                xs,
                ys,
                where="pre",
                color=SERVER_COLOR,
                lw=1,
                ls="--",
                label=plain(f"{run.label}: server generation tok/s (between scrapes)"),
            )
        drawn = True
    if not drawn:
        empty_note(ax, "no time series in the reports")
        ax2.set_yticks([])
    else:
        style(ax, xlabel="seconds since the run started", ylabel="output tokens / s")
        ax2.set_ylabel("requests in flight (mean over the bucket)")
        ax.set_ylim(bottom=0)
        ax2.set_ylim(bottom=0)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper right")
    ax.set_title("Throughput and requests in flight over time", fontsize=12)
    return Figure(
        "throughput",
        "Throughput and requests in flight over time",
        "Line chart of output tokens per second and of requests in flight against time.",
        "Solid: output tokens per second in each time bucket (a turn's tokens are spread "
        "evenly from its first token to its end). Dotted, right axis: requests in flight. "
        "Dashed: the server's generation rate between /metrics samples, when scraped.",
        to_png(fig),
    )


def cache_kv_over_time(runs: Sequence[Run]) -> Figure:
    """The prefix-cache hit rate over time (client and server) and the server's KV usage."""
    shown = list(runs[:4])
    fig, axes = new_figure(len(shown), 1, size=(10.0, 2.2 + 2.6 * len(shown)))
    missing_kv = []
    for i, (ax, run) in enumerate(zip(axes, shown, strict=True)):
        tp = run.report.get("throughput") or {}
        cx, cy = bucket_steps(
            tp.get("t_s") or [], tp.get("dt_s") or [], tp.get("cache_hit_rate") or []
        )
        pts = any(y == y for y in cy)
        if pts:
            ax.step(
                cx,
                cy,
                where="post",
                color=color(i),
                lw=1.8,
                label="cache hit rate (client: cached / prompt tokens, per bucket)",
            )
        series = (run.server or {}).get("series") or {}
        st = series.get("t_s") or []
        kx, ky = gaps(st, series.get("kv_cache_usage") or [])
        kv = any(y == y for y in ky)
        if kv:
            # KV usage on its own axis, in %: a big deployment may hold a run in 0.01 %.
            axk = ax.twinx()
            pct = [y * 100 for y in ky]
            axk.plot(
                kx,
                pct,
                color=SERVER_COLOR,
                lw=1.5,
                marker=".",
                label="KV-cache usage, % (server gauge, right axis)",
            )
            axk.fill_between(
                kx, [y if y == y else 0.0 for y in pct], color=SERVER_COLOR, alpha=0.12, lw=0
            )
            top = max(y for y in pct if y == y)
            axk.set_ylim(0, max(top * 1.25, 1e-6))
            axk.set_ylabel("KV-cache usage (%)")
            kv_handles = axk.get_legend_handles_labels()
        else:
            missing_kv.append(run.label)
            kv_handles = ([], [])
        hx, hy = gaps(st, series.get("cache_hit_rate") or [])
        sh = any(y == y for y in hy)
        if sh:
            ax.step(
                hx,
                hy,
                where="pre",
                color=SERVER_COLOR,
                ls="--",
                lw=1,
                label="cache hit rate (server counters, between scrapes)",
            )
        if not pts and not kv and not sh:
            empty_note(ax, plain(f"{run.label}: no cache figures reported"))
            continue
        ax.set_ylim(0, 1.05)
        style(
            ax,
            title=plain(run.label),
            xlabel="seconds since the run started",
            ylabel="cache hit rate (fraction)",
        )
        h, lab = ax.get_legend_handles_labels()
        ax.legend(h + kv_handles[0], lab + kv_handles[1], fontsize=8, loc="lower right")
    fig.suptitle("Prefix-cache hit rate and KV-cache usage over time", fontsize=12)
    caption = (
        "Cache hit rate: the share of prompt tokens the server served from its prefix cache "
        "(client: from usage.cached_tokens in each time bucket; server: the change in its "
        "hit and query counters between /metrics samples). KV usage: the share of the "
        "server's KV cache held, sampled from /metrics (right axis, in %). A falling hit "
        "rate while KV usage sits near 100 % means cached prefixes are being evicted."
    )
    if missing_kv:
        caption += (
            f" No KV usage for {', '.join(missing_kv)}: the report has no server series "
            "(sample /metrics during the run with ServerWatch)."
        )
    return Figure(
        "cache_kv",
        "Prefix-cache hit rate and KV-cache usage over time",
        "Line charts of the prefix-cache hit rate and the KV-cache usage (0 to 1) against "
        "time, one panel per run.",
        caption,
        to_png(fig),
    )


def _session_lines(run: Run) -> dict[str, list[tuple[int, float]]]:
    """Each session's (turn, prompt tokens) of the kept turns; a row without those as
    numbers is left out (rows are read field by field: ``check_report``)."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for s in run_samples(run):
        ctx = s.get("prompt_tokens")
        if ctx is None:
            ctx = s.get("estimated_prompt_tokens")
        turn = s.get("turn")
        if isinstance(ctx, int | float) and isinstance(turn, int | float):
            lines.setdefault(str(s.get("session_id")), []).append((int(turn), float(ctx)))
    return lines


def context_growth(runs: Sequence[Run], *, max_lines: int = 100) -> Figure:
    """Prompt tokens by turn: one thin line per session when the report keeps its turns
    (``samples``), and each run's p10–p90 band and median by turn index."""
    fig, (ax,) = new_figure(size=(10.0, 5.5))
    drawn = False
    per_session = False
    growth: list[str] = []
    for i, run in enumerate(runs):
        lines = _session_lines(run)
        for pts in list(lines.values())[:max_lines]:
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color(i), lw=0.6, alpha=0.3)
            per_session = True
        rows = (run.report.get("context") or {}).get("by_turn") or []
        rows = [r for r in rows if (r.get("context_tokens") or {}).get("count")]
        if rows:
            x = [r["turn"] for r in rows]
            ctx = [r["context_tokens"] for r in rows]
            p10, p50, p90 = ([c.get(k) for c in ctx] for k in ("p10", "p50", "p90"))
            if all(v is not None for v in p10 + p90):
                ax.fill_between(x, p10, p90, color=color(i), alpha=0.15, lw=0)
            ax.plot(
                x,
                p50,
                color=color(i),
                lw=2.2,
                marker="o",
                ms=3,
                label=plain(f"{run.label}: median session (band: p10–p90)"),
            )
            first, last = p50[0], p50[-1]
            if isinstance(first, int | float) and isinstance(last, int | float):
                growth.append(f"{run.label}: {first:,.0f} → {last:,.0f} tokens by turn {x[-1]}")
            drawn = True
    if not drawn and not per_session:
        empty_note(ax, "no prompt sizes in the reports (the server sent no usage)")
    else:
        style(
            ax,
            xlabel="turn of the session (0 = first request)",
            ylabel="prompt tokens sent (context; axis not from 0)",
        )
        ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Context growth per session: prompt tokens by turn", fontsize=12)
    caption = (
        "Each turn resends the whole conversation, so the prompt grows by the previous "
        "answer and tool results every turn. Thick line: the median over sessions at each "
        "turn; band: p10 to p90. The y axis starts near the first prompt's size, not 0."
        + (f" Median growth — {'; '.join(growth)}." if growth else "")
    )
    caption += (
        f" Thin lines: single sessions (up to {max_lines} per run)."
        if per_session
        else " Single sessions are drawn when the report keeps its turns "
        "(FleetStats(keep_samples=True), report(include_samples=True))."
    )
    return Figure(
        "context_growth",
        "Context growth per session: prompt tokens by turn",
        "Line chart of prompt tokens against turn number: per-session lines and the median.",
        caption,
        to_png(fig),
    )
