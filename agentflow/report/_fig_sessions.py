"""Figures of where a session's time went: a per-session timeline of queue wait, model
time and tool time, and how long each tool's calls took (the timeline's tool spans are
its calls together, with the client's bookkeeping; the durations are each call's own)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentflow._errors import ConfigError
from agentflow.report._canvas import (
    Figure,
    color,
    empty_note,
    log_axis,
    new_figure,
    plain,
    style,
    to_png,
)
from agentflow.report._runs import Run, run_samples

__all__ = ["session_timeline", "tool_durations"]

#: Seconds: tool durations below it are drawn at it (the log axis has no 0).
FLOOR_S = 1e-6

#: Timeline colours: queue wait, model (request sent → end of stream), tools.
QUEUE_COLOR, MODEL_COLOR, TOOLS_COLOR = "#E69F00", "#0072B2", "#009E73"


def _spans(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[tuple[float, float]]]:
    """One session's (start, length) spans, ns, of queue wait, model time and tool time."""
    rows = sorted(rows, key=lambda r: r["turn"] if isinstance(r.get("turn"), int) else 0)
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
    wait, model time and tool time, from its turns' ``ready``, ``sent`` and ``end``.

    Raises:
        ConfigError: ``max_sessions`` is not an integer ≥ 1.
    """
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ConfigError(
            f"session_timeline: max_sessions must be an integer ≥ 1, got {max_sessions!r}"
        )
    run = next((r for r in runs if run_samples(r)), None)
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
        for s in run_samples(run):
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
            else [order[round(k * (n - 1) / max(1, max_sessions - 1))] for k in range(max_sessions)]
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
