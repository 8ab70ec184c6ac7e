"""The demo's figures: a live terminal view while it runs, a summary and a JSON report after.

Figures measured against a time-scaled simulator (``x-agentflow-time-scale`` > 1: the
server runs slower than the deployment it models) are also shown scaled back to the
deployment's speed, and say so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from agentflow._events import Event, SessionEndEvent, TurnEndEvent
from agentflow._fleet import FleetResult
from agentflow._metrics import TurnMetrics

__all__ = ["LiveView", "build_report", "percentile", "summary_table"]

REPORT_VERSION = 1


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0–100) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class _AgentRow:
    turns: int = 0
    ttft_s: float | None = None
    decode_tps: float | None = None
    context_tokens: int | None = None
    status: str = "running"


@dataclass
class LiveView:
    """A fleet callback that keeps running totals and draws them with rich.

    It handles only turn-end and session-end events (never per-token ones), so the
    stream's hot path does not pay for the view.
    """

    total_sessions: int
    time_scale: float = 1.0
    console: Console = field(default_factory=Console)
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    failed: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_reported: bool = False
    agents: dict[str, _AgentRow] = field(default_factory=dict)

    def __call__(self, event: Event) -> None:
        """Fold one event into the totals."""
        if isinstance(event, TurnEndEvent):
            m = event.metrics
            row = self.agents.setdefault(event.agent, _AgentRow())
            row.turns += 1
            row.ttft_s = m.ttft_s
            row.decode_tps = m.decode_tps
            row.context_tokens = m.prompt_tokens
            self.output_tokens += m.output_tokens
            self.prompt_tokens += m.prompt_tokens or 0
            if m.cached_tokens is not None:
                self.cache_reported = True
                self.cached_tokens += m.cached_tokens
        elif isinstance(event, SessionEndEvent):
            self.done += 1
            self.failed += not event.result.ok
            self.agents.setdefault(event.agent, _AgentRow()).status = event.result.status

    def render(self) -> Group:
        """The current view."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        hit = (
            f"{self.cached_tokens / self.prompt_tokens:.1%}"
            if self.cache_reported and self.prompt_tokens
            else "not reported"
        )
        head = (
            f"sessions {self.done}/{self.total_sessions} (failed {self.failed}) · "
            f"fleet {self.output_tokens / elapsed:,.0f} output tok/s · cache hit {hit}"
        )
        rows = [(a, r) for a, r in self.agents.items() if r.decode_tps is not None]
        rows.sort(key=lambda ar: ar[1].decode_tps or 0.0)
        shown = rows[:4] + rows[-4:] if len(rows) > 8 else rows
        table = Table(
            "agent",
            "turns",
            "TTFT",
            "decode tok/s",
            "context",
            "status",
            title="slowest and fastest agents",
            expand=False,
        )
        for name, r in shown:
            table.add_row(
                name,
                str(r.turns),
                _ms(r.ttft_s),
                _tps(r.decode_tps, self.time_scale),
                f"{r.context_tokens or 0:,}",
                r.status,
            )
        bar = ProgressBar(total=self.total_sessions, completed=self.done, width=60)
        return Group(head, bar, table)

    def live(self) -> Live:
        """A rich ``Live`` that redraws :meth:`render` four times a second."""
        return Live(
            get_renderable=self.render, console=self.console, refresh_per_second=4, transient=False
        )


def _ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:,.0f} ms"


def _tps(tps: float | None, scale: float) -> str:
    if tps is None:
        return "—"
    return f"{tps:,.0f}" if scale == 1 else f"{tps:,.0f} (×{scale:g} = {tps * scale:,.0f})"


def _dist(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "mean": sum(values) / len(values) if values else None,
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
    }


def build_report(result: FleetResult, *, run: dict[str, Any]) -> dict[str, Any]:
    """The demo's JSON report: run settings, fleet figures, and one entry per agent.

    Times are seconds as measured on this machine; ``time_scale`` in ``run`` says how much
    slower than the modelled deployment the server ran (divide times by it).
    """
    turns: list[TurnMetrics] = [t.metrics for s in result.sessions for t in s.turns]
    prompt = sum(m.prompt_tokens or 0 for m in turns)
    reported = [m for m in turns if m.cached_tokens is not None]
    cached = sum(m.cached_tokens or 0 for m in reported)
    agents = []
    for s in result.sessions:
        ms = [t.metrics for t in s.turns]
        decode = [m.decode_tps for m in ms if m.decode_tps is not None]
        agents.append(
            {
                "agent": s.agent,
                "session_id": s.session_id,
                "status": s.status,
                "error": None if s.error is None else f"{type(s.error).__name__}: {s.error}",
                "turns": len(ms),
                "output_tokens": sum(m.output_tokens for m in ms),
                "context_tokens": ms[-1].prompt_tokens if ms else None,
                "prompt_tokens": sum(m.prompt_tokens or 0 for m in ms),
                "cached_tokens": sum(m.cached_tokens or 0 for m in ms)
                if any(m.cached_tokens is not None for m in ms)
                else None,
                "ttft_s": _dist([m.ttft_s for m in ms if m.ttft_s is not None]),
                "decode_tps": _dist(decode),
                "e2e_s": _dist([m.e2e_s for m in ms]),
            }
        )
    return {
        "version": REPORT_VERSION,
        "run": run,
        "fleet": {
            "sessions": len(result.sessions),
            "completed": sum(s.ok for s in result.sessions),
            "failed": len(result.failed),
            "turns": len(turns),
            "wall_s": result.wall_s,
            "output_tokens": result.output_tokens,
            "output_tps": result.output_tps,
            "prompt_tokens": prompt,
            "cached_tokens": cached if reported else None,
            "cache_hit_rate": cached / prompt if reported and prompt else None,
            "peak_in_flight": result.peak_in_flight,
            "queue_wait_s": _dist([m.queue_wait_s for m in turns]),
            "ttft_s": _dist([m.ttft_s for m in turns if m.ttft_s is not None]),
            "tpot_s": _dist([m.tpot_s for m in turns if m.tpot_s is not None]),
            "decode_tps": _dist([m.decode_tps for m in turns if m.decode_tps is not None]),
            "e2e_s": _dist([m.e2e_s for m in turns]),
            "callback_errors": len(result.callback_errors),
        },
        "agents": agents,
    }


def summary_table(report: dict[str, Any]) -> Table:
    """The end-of-run summary, from a report."""
    f = report["fleet"]
    scale = float(report["run"].get("time_scale") or 1.0)
    t = Table("figure", "p50", "p90", "p99", title="agentflow demo — fleet summary")
    for key, label in (
        ("ttft_s", "TTFT (s)"),
        ("tpot_s", "TPOT (s)"),
        ("e2e_s", "E2E (s)"),
        ("queue_wait_s", "queue wait (s)"),
    ):
        d = f[key]
        t.add_row(label, *(_fmt(d[p]) for p in ("p50", "p90", "p99")))
    d = f["decode_tps"]
    t.add_row("decode tok/s per agent", *(_fmt(d[p]) for p in ("p50", "p90", "p99")))
    if scale != 1:
        t.add_row(
            f"  … at deployment speed (×{scale:g})",
            *(_fmt(None if d[p] is None else d[p] * scale) for p in ("p50", "p90", "p99")),
        )
    hit = f["cache_hit_rate"]
    t.caption = (
        f"{f['completed']}/{f['sessions']} sessions completed, {f['turns']} turns, "
        f"{f['output_tokens']:,} output tokens in {f['wall_s']:.1f} s "
        f"({f['output_tps']:,.0f} tok/s) · prefix-cache hit "
        + ("not reported" if hit is None else f"{hit:.1%}")
    )
    return t


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.4f}" if abs(x) < 10 else f"{x:,.0f}"
