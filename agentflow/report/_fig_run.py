"""Figures of what the turns were: prompt and output lengths, errors and retries over
time, a per-session timeline of queue wait, model time and tool time, and how long each
tool's calls took."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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
from agentflow.report._runs import Run

__all__ = ["errors_retries", "lengths", "session_timeline", "tool_durations"]

#: The length panels: report distribution key, sample fields (first present wins), title.
_LENGTHS = (
    ("context_tokens", ("prompt_tokens", "estimated_prompt_tokens"), "prompt tokens per turn"),
    ("output_tokens", ("output_tokens",), "output tokens per turn"),
)

#: Seconds: tool durations below it are drawn at it (the log axis has no 0).
FLOOR_S = 1e-6

#: Timeline colours: queue wait, model (request sent → end of stream), tools.
QUEUE_COLOR, MODEL_COLOR, TOOLS_COLOR = "#E69F00", "#0072B2", "#009E73"


def _samples(run: Run) -> list[Mapping[str, Any]]:
    s = run.report.get("samples")
    return [x for x in s if isinstance(x, Mapping)] if isinstance(s, list) else []


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


def _spans(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[tuple[float, float]]]:
    """One session's (start, length) spans, ns, of queue wait, model time and tool time."""
    rows = sorted(rows, key=lambda r: int(r.get("turn") or 0))
    queue: list[tuple[float, float]] = []
    model: list[tuple[float, float]] = []
    tools: list[tuple[float, float]] = []
    for k, r in enumerate(rows):
        ready, sent, end = r.get("ready_ns"), r.get("sent_ns"), r.get("end_ns")
        if not (isinstance(ready, int) and isinstance(sent, int) and isinstance(end, int)):
            continue
        if sent > ready:
            queue.append((ready, sent - ready))
        model.append((sent, max(0, end - sent)))
        nxt = rows[k + 1].get("ready_ns") if k + 1 < len(rows) else None
        if r.get("tool_calls") and isinstance(nxt, int) and nxt > end:
            tools.append((end, nxt - end))
    return queue, model, tools


def session_timeline(runs: Sequence[Run], *, max_sessions: int = 30) -> Figure:
    """A sample of sessions (the first run that keeps its turns): each a row of queue
    wait, model time and tool time, from its turns' ``ready``, ``sent`` and ``end``."""
    run = next((r for r in runs if _samples(r)), None)
    fig, (ax,) = new_figure(size=(11.0, 6.0))
    caption = (
        "Each row is one session; its bars, left to right, are its turns: orange, waiting "
        "for a slot (turn ready → request sent: the fleet's own queue, which for a retried "
        "turn includes its failed attempts and their backoff); blue, the model "
        "(request sent → end of stream: the server's queue, prefill and decode); green, "
        "tools (a turn that called tools ended → the next turn ready: the tools' run time "
        "and the client's bookkeeping). Gaps are neither (the client preparing a turn). "
    )
    if run is None:
        empty_note(ax, "no turns kept in the reports: the timeline needs samples")
        caption += (
            "Needs each turn kept: FleetStats(keep_samples=True), report(include_samples=True)."
        )
    else:
        by_session: dict[str, list[Mapping[str, Any]]] = {}
        for s in _samples(run):
            by_session.setdefault(str(s.get("session_id")), []).append(s)
        origin = min(
            (s["ready_ns"] for rows in by_session.values() for s in rows
             if isinstance(s.get("ready_ns"), int)),
            default=0,
        )  # fmt: skip
        totals = [0.0, 0.0, 0.0]
        spans = {}
        for sid, rows in by_session.items():
            q, m, t = _spans(rows)
            spans[sid] = (q, m, t)
            for j, part in enumerate((q, m, t)):
                totals[j] += sum(length for _, length in part)
        order = sorted(spans, key=lambda sid: min((a for a, _ in spans[sid][1]), default=0))
        n = len(order)
        picked = (
            order
            if n <= max_sessions
            else [order[round(k * (n - 1) / (max_sessions - 1))] for k in range(max_sessions)]
        )
        for y, sid in enumerate(picked):
            for part, c in zip(spans[sid], (QUEUE_COLOR, MODEL_COLOR, TOOLS_COLOR), strict=True):
                if part:
                    ax.broken_barh(
                        [((a - origin) * 1e-9, length * 1e-9) for a, length in part],
                        (y - 0.4, 0.8),
                        facecolors=c,
                        edgecolors="white",
                        linewidth=0.6,  # each turn's bar outlined: turns stay apart
                    )
        ax.set_yticks(range(len(picked)))
        ax.set_yticklabels([plain(_short(s)) for s in picked], fontsize=7)
        ax.invert_yaxis()
        style(ax, xlabel="seconds since the first turn became ready", ylabel="session")
        from matplotlib.patches import Patch

        ax.legend(
            handles=[
                Patch(color=QUEUE_COLOR, label="queue wait"),
                Patch(color=MODEL_COLOR, label="model"),
                Patch(color=TOOLS_COLOR, label="tools"),
            ],
            fontsize=8,
            loc="lower right",
        )
        whole = sum(totals)
        share = (
            ", ".join(
                f"{name} {x / whole:.1%}"
                for name, x in zip(("queue wait", "model", "tools"), totals, strict=True)
            )
            if whole > 0
            else "no time measured"
        )
        caption += (
            f"{run.label}: {len(picked)} of {n} sessions"
            + (" (evenly spaced by start)" if n > len(picked) else "")
            + f". Over all {n} sessions, their measured time was {share}."
        )
        if run.time_scale != 1:
            caption += f" Times as measured (×{run.time_scale:g} slower than the deployment)."
    ax.set_title("Per-session timeline: queue wait, model, tools", fontsize=12)
    return Figure(
        "session_timeline",
        "Per-session timeline: queue wait, model, tools",
        "Gantt chart of a sample of sessions: for each, bars of the time spent waiting "
        "for a slot, in the model, and running tools, against time.",
        caption,
        to_png(fig),
    )


def _short(session_id: str) -> str:
    return session_id if len(session_id) <= 18 else session_id[:8] + "…" + session_id[-8:]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _tools(run: Run) -> dict[str, Mapping[str, Any]]:
    t = run.report.get("tools")
    if not isinstance(t, Mapping):
        return {}
    return {str(k): v for k, v in t.items() if isinstance(v, Mapping) and v.get("calls")}


def tool_durations(runs: Sequence[Run]) -> Figure:
    """Each tool's call durations (the report's ``tools``): p50 to p99 as a bar, p50 and
    the longest call marked, one row per tool and run."""
    fig, (ax,) = new_figure(size=(10.0, 4.8))
    names = sorted({n for r in runs for n in _tools(r)})
    totals: list[str] = []
    rows: list[str] = []
    floored = 0  # rows with a value drawn at FLOOR_S rather than where it is
    y = 0
    for i, run in enumerate(runs):
        tools = _tools(run)
        if not tools:
            totals.append(f"{run.label}: no tool durations in the report")
            continue
        calls = sum(int(t.get("calls") or 0) for t in tools.values())
        errors = sum(int(t.get("errors") or 0) for t in tools.values())
        spent = sum(float(t.get("total_s") or 0.0) for t in tools.values())
        totals.append(f"{run.label}: {calls:,} calls ({errors:,} failed), {spent:,.2f} s in all")
        for name in names:
            t = tools.get(name)
            d = t.get("duration_s") if t is not None else None
            if t is None or not isinstance(d, Mapping):
                continue
            p50, p99, top = (_num(d.get(k)) for k in ("p50", "p99", "max"))
            if p50 is None or p99 is None or top is None:
                continue
            lo = max(p50, FLOOR_S)
            floored += min(p50, p99, top) < FLOOR_S
            ax.barh(y, max(p99, lo) - lo, left=lo, height=0.6, color=color(i), alpha=0.45)
            ax.plot([lo], [y], marker="o", color=color(i), ms=5)
            ax.plot([max(top, FLOOR_S)], [y], marker="|", color=color(i), ms=12, mew=2)
            n, bad = int(t.get("calls") or 0), int(t.get("errors") or 0)
            rows.append(
                f"{name} ({n:,} calls"
                + (f", {bad:,} failed" if bad else "")
                + ")"
                + (f" — {run.label}" if len(runs) > 1 else "")
            )
            y += 1
    if not rows:
        empty_note(
            ax,
            "no tool durations in the reports (tools report their durations in events: "
            "subscribe FleetStats, or build it from the result with a RunJournal)",
        )
    else:
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([plain(r) for r in rows], fontsize=8)
        ax.invert_yaxis()
        style(ax, xlabel="seconds per call (dot: p50, bar: to p99, tick: longest)")
        log_axis(ax, "x")
    ax.set_title("Tool call durations", fontsize=12)
    return Figure(
        "tool_durations",
        "Tool call durations",
        "For each tool, a bar from the median to the 99th percentile of its calls' "
        "durations, with the longest call marked.",
        "Each tool call's own run time, as the agent timed it (ToolResultEvent.duration_s; "
        "the timeline's green spans are the wall time from a turn's end to the next turn, "
        "its calls together). A long tail here holds sessions back between turns. "
        + (
            f"On {floored:,} of the rows, durations under 1 µs (0 s: a call that took no "
            "measurable time, as in-memory tools do in virtual time) are drawn at 1 µs, "
            "the log axis' floor. "
            if floored
            else ""
        )
        + "; ".join(totals)
        + ".",
        to_png(fig),
    )
