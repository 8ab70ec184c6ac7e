"""The demo's figures: a live terminal view while it runs, a summary and a JSON report after.

The live view is :class:`agentflow.report.LiveView` (re-exported here for the demo).

Figures measured against a time-scaled simulator (``x-agentflow-time-scale`` > 1: the
server runs slower than the deployment it models) are also shown scaled back to the
deployment's speed, and say so.

rich (the ``demo`` extra) is imported by :func:`summary_table` only: the library's own
uses of this module — :func:`agentflow.store.export_report` (:func:`build_report`) and
:func:`agentflow.bench.run_bench` (:func:`failure_lines`) — work without it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentflow._fleet import FleetResult
from agentflow._session_types import SessionResult
from agentflow.context._reuse import prefix_reuse
from agentflow.report._live import LiveView
from agentflow.stats import SLO, FleetStats, RunJournal

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "LiveView",
    "advertised_time_scale",
    "build_report",
    "failure_lines",
    "goodput_line",
    "summary_table",
]


def build_report(
    result: FleetResult,
    *,
    run: dict[str, Any],
    start_ns: int | None = None,
    slos: Iterable[SLO] = (),
    journal: RunJournal | None = None,
    unfinished: Iterable[str] = (),
) -> dict[str, Any]:
    """The demo's JSON report: :mod:`agentflow.stats`' ``agentflow.report/2``, one row per
    session and one sample per turn (``docs/report-schema.md``), with goodput against
    ``slos``; with the run's ``journal``, every retry and error placed in time and the
    tools' durations (``tools``, ``fleet.tool_s``).

    Times are seconds as measured on this machine, from ``start_ns`` (the trace clock's
    reading when the run started; default the first turn); ``time_scale`` in ``run`` says
    how much slower than the modelled deployment the server ran (divide times by it).
    ``unfinished``: ids of sessions that had not ended (:meth:`FleetStats.from_result`).
    """
    stats = FleetStats.from_result(
        result,
        journal=journal,
        unfinished=unfinished,
        per="session",
        keep_samples=True,
        start_ns=start_ns,
        slos=slos,
    )
    report = stats.report(run=run, include_samples=True)
    report["prefix_reuse"] = prefix_reuse(result.sessions).to_dict()
    return report


def advertised_time_scale(result: FleetResult) -> float | None:
    """The time scale the server advertised (``x-agentflow-time-scale``), if it did: a
    finite number > 0, else ``None`` (``nan``, ``inf``, ``1e400`` or ``-2`` would make
    the report no plain JSON, or scale its times by nonsense)."""
    for s in result.sessions:
        for t in s.turns:
            value = t.trace.response_headers.get("x-agentflow-time-scale")
            if value:
                try:
                    scale = float(value)
                except ValueError:
                    return None
                return scale if math.isfinite(scale) and scale > 0 else None
    return None


def summary_table(report: dict[str, Any]) -> Table:
    """The end-of-run summary, from an ``agentflow.report/2`` report."""
    from rich.table import Table

    f, dists = report["fleet"], report["distributions"]
    scale = float(report["run"].get("time_scale") or 1.0)
    t = Table(
        "figure",
        "p50",
        "p90",
        "p99",
        title="agentflow demo — fleet summary",
        caption_justify="left",
    )
    for key, label in (
        ("ttft_s", "TTFT (s)"),
        ("tpot_s", "TPOT (s)"),
        ("e2e_s", "E2E (s)"),
        ("queue_wait_s", "queue wait (s)"),
    ):
        d = dists[key]
        t.add_row(label, *(_fmt(d[p]) for p in ("p50", "p90", "p99")))
    # Per agent: each session's decode speed over its turns (docs/metrics.md), what the
    # HTML report draws — not distributions.decode_tps, one value per turn.
    d = report["per_agent"]["decode_tps"]
    t.add_row("decode tok/s per agent", *(_fmt(d.get(p)) for p in ("p50", "p90", "p99")))
    if scale != 1:
        t.add_row(
            f"  … at deployment speed (×{scale:g})",
            *(_fmt(None if d.get(p) is None else d[p] * scale) for p in ("p50", "p90", "p99")),
        )
    hit, tps = f["cache_hit_rate"], f["output_tps"] or 0.0
    t.caption = (
        f"{f['completed']}/{f['sessions']} sessions completed, {f['turns']} turns, "
        f"{f['output_tokens']:,} output tokens in {f['duration_s']:.1f} s "
        f"({tps:,.0f} tok/s) · prefix-cache hit "
        + ("not reported" if hit is None else f"{hit:.1%}")
    )
    reuse = report.get("prefix_reuse", {}).get("fleet")
    if reuse is not None:
        eff, raised = reuse.get("efficiency"), reuse.get("turns_raised") or 0
        t.caption += " · prefix-reuse efficiency " + (
            "not available" if eff is None else f"{eff:.1%}"
        )
        if eff is not None and raised:
            # Turns whose server cached more than the client's maximum (see prefix_reuse).
            t.caption += f" (maximum raised to the server's count on {raised} turns)"
    return t


def goodput_line(g: dict[str, Any], scale: float = 1.0) -> str:
    """One SLO's goodput, from a report's ``goodput`` entry, as a sentence."""
    frac, tps = g.get("turn_fraction"), g.get("output_tps")
    agents = g.get("agent_fraction")
    text = (
        f"goodput {g['name']}: "
        + ("no turns" if frac is None else f"{frac:.1%} of turns met it")
        + f" ({g['turns_met']:,}/{g['turns']:,}"
        + ("" if tps is None else f", {tps:,.0f} output tok/s")
        + ")"
    )
    if agents is not None:
        text += f"; {g['agents_met']}/{g['agents']} sessions met it on every turn"
    missed = {k: v for k, v in (g.get("failed_bounds") or {}).items() if v}
    if missed:
        text += " · missed: " + ", ".join(f"{k} {v:,}" for k, v in missed.items())
    if scale != 1:
        text += f" (bounds on times as measured, ×{scale:g} slower than the deployment)"
    return text


def failure_lines(result: FleetResult | Iterable[SessionResult], most: int = 3) -> list[str]:
    """Why sessions failed: the ``most`` commonest errors, each with how many sessions
    it ended (the report has every one); none when every session completed or stopped.
    Of a fleet's result, or of sessions (``agentflow bench``: a level's, over its
    repeats).

    Errors are told apart by type and message, less what names the session that failed
    (its id and agent, which the demo gives each session its own): the same failure
    in many sessions is one line, with one session's message as its example."""
    groups: Counter[tuple[str, str]] = Counter()
    example: dict[tuple[str, str], str] = {}
    alike: dict[tuple[str, str], bool] = {}
    sessions = result.sessions if isinstance(result, FleetResult) else result
    for s in sessions:
        if s.status != "error" or s.error is None:
            continue
        kind, text = type(s.error).__name__, str(s.error)
        key = (kind, _unnamed(text, s.session_id, s.agent))
        groups[key] += 1
        alike[key] = example.setdefault(key, text) == text and alike.get(key, True)
    if not groups:
        return []
    lines = [f"{sum(groups.values())} sessions failed:"]
    for key, n in groups.most_common(most):
        first = example[key].splitlines()[0] if example[key] else ""
        said = f"{key[0]}: " if alike[key] else f"{key[0]}, e.g. "
        lines.append(f"  {n} × {said}{first[:300]}")
    if len(groups) > most:
        lines.append(f"  … and {len(groups) - most} other errors (see the report)")
    return lines


def _unnamed(text: str, session_id: str, agent: str) -> str:
    """``text`` without the session's id and its agent's name (quoted, as errors name
    them), and with its counts of thousands (``~7,487 tokens``: they differ by session)
    as ``#``."""
    for name in (session_id, agent):
        text = text.replace(repr(name), "…")
    return _LARGE_NUMBER.sub("#", text)


# A number with a thousands separator, or of four digits or more: a count of tokens or
# bytes that differs from session to session (an HTTP status or a turn number does not).
_LARGE_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+|\d{4,}")


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.4f}" if abs(x) < 10 else f"{x:,.0f}"
