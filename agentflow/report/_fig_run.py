"""Figures of what the turns were: prompt and output lengths, and errors and retries over
time.

Where the sessions' time went — the per-session timeline and the tools' call durations —
is ``_fig_sessions``; its names are importable from here, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentflow.report._canvas import (
    Figure,
    bucket_steps,
    color,
    empty_note,
    log_axis,
    new_figure,
    plain,
    style,
    to_png,
)
from agentflow.report._fig_sessions import FLOOR_S as FLOOR_S
from agentflow.report._fig_sessions import MODEL_COLOR as MODEL_COLOR
from agentflow.report._fig_sessions import QUEUE_COLOR as QUEUE_COLOR
from agentflow.report._fig_sessions import TOOLS_COLOR as TOOLS_COLOR
from agentflow.report._fig_sessions import _num as _num
from agentflow.report._fig_sessions import _short as _short
from agentflow.report._fig_sessions import _spans as _spans
from agentflow.report._fig_sessions import _tools as _tools
from agentflow.report._fig_sessions import session_timeline, tool_durations
from agentflow.report._runs import Run
from agentflow.report._runs import run_samples as _samples

__all__ = ["errors_retries", "lengths", "session_timeline", "tool_durations"]

#: The length panels: report distribution key, sample fields (first present wins), title.
_LENGTHS = (
    ("context_tokens", ("prompt_tokens", "estimated_prompt_tokens"), "prompt tokens per turn"),
    ("output_tokens", ("output_tokens",), "output tokens per turn"),
)


def _sample_values(run: Run, fields: Sequence[str]) -> list[float]:
    out = []
    for s in _samples(run):
        for f in fields:
            v = s.get(f)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.append(float(v))
                break
    return out


def lengths(runs: Sequence[Run]) -> Figure:
    """Prompt and output tokens per turn: histograms of the turns when every report keeps
    them (``samples``), else the CDFs of the report's sketches."""
    fig, axes = new_figure(1, 2, size=(11.0, 4.8))
    histograms = all(_samples(r) for r in runs)
    medians: list[str] = []
    off_axis: list[str] = []
    for ax, (key, fields, title) in zip(axes, _LENGTHS, strict=True):
        drawn = False
        if histograms:
            values = [_sample_values(r, fields) for r in runs]
            flat = [v for vs in values for v in vs]
            if flat:
                edges, log = _edges(flat)
                zeros = sum(v < edges[0] for v in flat)
                if zeros:
                    what = title.split(" per")[0]
                    off_axis.append(f"{zeros:,} turns with 0 {what} are not on the log axis")
                for i, (run, vs) in enumerate(zip(runs, values, strict=True)):
                    if not vs:
                        continue
                    ax.hist(
                        vs,
                        bins=edges,
                        histtype="step",
                        lw=1.8,
                        color=color(i),
                        label=plain(run.label),
                    )
                    med = sorted(vs)[(len(vs) - 1) // 2]
                    if med >= edges[0]:  # (a median of 0 is not on a log axis)
                        ax.axvline(med, color=color(i), ls="--", lw=1)
                    drawn = True
                if drawn and log:
                    log_axis(ax, "x")
            ylabel = "turns"
        else:
            xs: list[float] = []
            for i, run in enumerate(runs):
                d = run.distribution(key)
                cdf = (d or {}).get("cdf") or []
                pts = [(float(v), float(q)) for q, v in cdf if isinstance(v, int | float)]
                if pts:
                    ax.step([p[0] for p in pts], [p[1] for p in pts], where="post",
                            color=color(i), lw=1.8, label=plain(run.label))  # fmt: skip
                    xs += [p[0] for p in pts]
                    drawn = True
            if xs and min(xs) > 0 and max(xs) / min(xs) > 20:
                log_axis(ax, "x")
            ylabel = "fraction of turns ≤ x"
        for run in runs:
            d = run.distribution(key) or {}
            if isinstance(d.get("p50"), int | float):
                medians.append(
                    f"{run.label}: {title.split(' per')[0]} p50 {d['p50']:,.0f}, "
                    f"p99 {d.get('p99') or 0:,.0f}"
                )
        if not drawn:
            empty_note(ax, f"no {title} in the reports")
            ax.set_title(title, fontsize=11)
            continue
        style(ax, title=title, xlabel="tokens", ylabel=ylabel)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle("Prompt and output lengths per turn", fontsize=12)
    how = (
        "Histograms of every turn (40 bins, log-spaced when the range is wide); dashed "
        "lines are medians." + "".join(f" {n[0].upper()}{n[1:]}." for n in off_axis)
        if histograms
        else "CDFs from the report's sketches (each quantile within ±1 %); histograms need "
        "each turn kept (FleetStats(keep_samples=True), report(include_samples=True))."
    )
    return Figure(
        "lengths",
        "Prompt and output lengths per turn",
        "Two panels: the distribution of prompt tokens and of output tokens over the "
        "turns of each run.",
        "Left: the prompt each turn sent (the server's count, else the client's "
        "estimate) — in an agent's session it grows turn by turn, so a wide spread is "
        "the sessions' growth. Right: output tokens per turn — tool calls are short, "
        f"final answers long. {how}" + (f" {'; '.join(medians)}." if medians else ""),
        to_png(fig),
    )


def _edges(flat: Sequence[float]) -> tuple[list[float], bool]:
    """The 40 bins of a length histogram, and whether they are log-spaced (when the
    positive values span more than 20×). Linear bins start at the smallest value, so
    turns of 0 tokens (a stream that ended without output) are counted; log bins start
    at the smallest positive value, and the caller says how many turns they leave out."""
    positive = [v for v in flat if v > 0]
    lo, hi = max(1.0, min(positive, default=1.0)), max(1.0, max(positive, default=1.0))
    if hi / lo > 20:
        edges = [lo * (hi / lo) ** (k / 40) for k in range(41)]
        edges[-1] *= 1.0001
        return edges, True
    first = min(lo, min(flat))
    step = max(1.0, (hi - first) / 40)
    return [first + step * k for k in range(42)], False


def errors_retries(runs: Sequence[Run]) -> Figure:
    """Retries and errors per time bucket (``throughput.retries`` / ``.errors``)."""
    fig, (ax,) = new_figure(size=(10.0, 4.5))
    totals: list[str] = []
    any_event = False
    drawn = False
    for i, run in enumerate(runs):
        tp = run.report.get("throughput") or {}
        t, dt = tp.get("t_s") or [], tp.get("dt_s") or []
        retries, errors = tp.get("retries"), tp.get("errors")
        f = run.fleet
        by_where = f.get("errors") or {}
        n_err = sum(v for v in by_where.values() if isinstance(v, int))
        where = ", ".join(f"{k} {v}" for k, v in sorted(by_where.items()) if v)
        totals.append(
            f"{run.label}: {f.get('retries', 0):,} retries, {n_err:,} errors"
            + (f" ({where})" if where else "")
        )
        if not isinstance(retries, list) or not isinstance(errors, list):
            totals[-1] += (
                " (no time series of errors and retries: the report was written before "
                "agentflow recorded them)"
            )
            continue
        unplaced = n_err - sum(errors) + int(f.get("retries") or 0) - sum(retries)
        if unplaced > 0:
            totals[-1] += (
                f", {unplaced:,} of them not in time (a report built from a finished result "
                "without its RunJournal keeps no time for the attempts of a turn that never "
                "finished, nor for a session that failed before finishing one)"
            )
        if not t:
            continue
        drawn = True
        any_event = any_event or any(retries) or any(errors)
        ax.step(*bucket_steps(t, dt, retries), where="post", color=color(i), lw=1.8,
                label=plain(f"{run.label}: retries"))  # fmt: skip
        ax.step(*bucket_steps(t, dt, errors), where="post", color=color(i), lw=1.2, ls="--",
                label=plain(f"{run.label}: errors"))  # fmt: skip
    if not drawn:
        empty_note(ax, "no time series of errors and retries in the reports")
    else:
        style(ax, xlabel="seconds since the run started", ylabel="events per time bucket")
        ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))
        ax.legend(fontsize=8, loc="upper right")
        if not any_event:
            ax.text(0.5, 0.6, "no errors or retries in the runs", ha="center",
                    transform=ax.transAxes, color="#555555")  # fmt: skip
    ax.set_title("Errors and retries over time", fontsize=12)
    widths = sorted({float((r.report.get("throughput") or {}).get("bucket_s") or 0) for r in runs})
    return Figure(
        "errors_retries",
        "Errors and retries over time",
        "Step chart of failed attempts that were retried and of errors, counted per time "
        "bucket, against time.",
        "Solid: attempts that failed and were sent again (a 429/5xx answer, a reset or "
        "stalled stream); dashed: errors (a session that failed, a tool that raised, a "
        "callback that raised). Counts per bucket of "
        + ", ".join(f"{w:g} s" for w in widths if w)
        + ". Retries bunched in time point at the server (overload, a restart); spread "
        "evenly, at a fault rate. Each is placed when it happened (the demo notes them "
        "with a RunJournal); from a finished result alone, a retry is placed at its failed "
        "attempt's end and a failed session at its last turn's end. " + "; ".join(totals) + ".",
        to_png(fig),
    )
