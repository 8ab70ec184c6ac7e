"""The HTML report: one self-contained file (CSS inline, PNGs base64-embedded).

Nothing is fetched when it opens: no scripts, fonts or stylesheets from elsewhere. Every
figure is a ``<section class="figure" id="fig-KEY">`` holding its ``<h2>`` title, an
``<img>`` whose ``alt`` describes it, and a caption saying how to read it.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow._redact import redact
from agentflow.report._canvas import Figure, number
from agentflow.report._runs import Run

__all__ = ["lag_p99_s", "lag_warning", "render_html"]

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } .meta { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: right; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
.figure { margin: 2em 0; } .figure img { max-width: 100%; border: 1px solid #eee; }
.caption { color: #444; max-width: 60em; }
.warn { background: #fff4e5; border-left: 4px solid #E69F00; padding: 0.5em 1em; }
.note { color: #555; font-size: 0.9em; }
"""


def _e(x: Any) -> str:
    return html.escape(redact(str(x)), quote=True)


def _num(v: Any, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return "—"
    return f"{number(v * scale, digits)}{unit}"


def _pct(v: Any) -> str:
    return f"{v:.1%}" if isinstance(v, int | float) and not isinstance(v, bool) else "—"


def lag_p99_s(lag: Mapping[str, Any]) -> float | None:
    """A report's loop lag at p99 (``run.loop_lag``): the larger of its ``p99_s`` and its
    ``wakeup_late_p99_s`` less 1 ms of timer rounding; ``None`` without either."""
    figures = [
        v - d
        for v, d in ((lag.get("p99_s"), 0.0), (lag.get("wakeup_late_p99_s"), 1e-3))
        if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return max(figures) if figures else None


def lag_warning(run: Run) -> str | None:
    """A warning when the client's loop lag (``run.loop_lag``) could inflate its latencies.

    The lag is the larger of its ``p99_s`` and its ``wakeup_late_p99_s`` less 1 ms of timer
    rounding (a report written before samples counted their timer's lateness shows a
    blocked loop only there). It warns when that is above 0.5 ms and 2 % of the median
    TTFT, or above 10 % of the median ITL. A median of 0 is no yardstick (no division by
    it), but a median ITL of 0 — half the chunks read together with the one before — is
    what a lagging client produces, so a lag above 0.5 ms then warns too."""
    lag = run.run.get("loop_lag")
    p99 = lag_p99_s(lag) if isinstance(lag, Mapping) else None
    if p99 is None:
        return None
    ttft = (run.distribution("ttft_s") or {}).get("p50")
    itl = (run.distribution("itl_s") or {}).get("p50")
    reasons = []
    if p99 > 5e-4 and isinstance(ttft, int | float) and ttft > 0 and p99 > 0.02 * ttft:
        reasons.append(f"{p99 / ttft:.1%} of the median TTFT")
    if isinstance(itl, int | float) and itl > 0 and p99 > 0.1 * itl:
        reasons.append(f"{p99 / itl:.0%} of the median ITL")
    elif isinstance(itl, int | float) and itl == 0 and p99 > 5e-4:
        reasons.append("a median ITL of 0: chunks read together, as a lagging client reads them")
    if not reasons:
        return None
    return (
        f"{run.label}: the client's event loop lagged {p99 * 1e3:,.2f} ms at p99 "
        f"({' and '.join(reasons)}). Chunks may have been stamped late by up to that much, "
        "so its latencies include some of the client's own delay. Check the client's CPU, "
        "and run fewer streams per process (or several processes) to measure the server."
    )


def _sessions(fleet: Mapping[str, Any]) -> str:
    """``ok/all`` of the sessions that ended; a stored run still running (or killed) also
    counts those that had not: ``0/0 (+6 unfinished)``, not ``0/0``."""
    cell = f"{fleet.get('completed', '—')}/{fleet.get('sessions', '—')}"
    unfinished = fleet.get("unfinished")
    if isinstance(unfinished, int) and unfinished > 0:
        cell += f" (+{unfinished} unfinished)"
    return cell


def _runs_table(runs: Sequence[Run]) -> str:
    head = (
        "run",
        "sessions ok/all",
        "turns",
        "duration s",
        "req/s",
        "output tok/s",
        "total tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "ITL p99 ms",
        "decode tok/s/agent p50",
        "cache hit",
        "time scale",
        "loop lag p99 ms",
    )
    rows = []
    for r in runs:
        f = r.fleet
        d = {k: r.distribution(k) or {} for k in ("ttft_s", "tpot_s", "itl_s")}
        per_agent = ((r.report.get("per_agent") or {}).get("decode_tps")) or {}
        lag = r.run.get("loop_lag") if isinstance(r.run.get("loop_lag"), Mapping) else {}
        cells = [
            _sessions(f),
            _num(f.get("turns"), 6),
            _num(f.get("duration_s"), 4),
            _num(f.get("turns_per_s")),
            _num(f.get("output_tps")),
            _num(_total_tps(f)),
            _num(d["ttft_s"].get("p50"), scale=1e3),
            _num(d["ttft_s"].get("p99"), scale=1e3),
            _num(d["tpot_s"].get("p50"), scale=1e3),
            _num(d["itl_s"].get("p99"), scale=1e3),
            _num(per_agent.get("p50")),
            _pct(f.get("cache_hit_rate")),
            f"{r.time_scale:g}",
            _num((lag or {}).get("p99_s"), scale=1e3),
        ]
        rows.append(
            f'<tr><td class="text">{_e(r.label)}</td>'
            + "".join(f"<td>{_e(c)}</td>" for c in cells)
            + "</tr>"
        )
    ths = "".join(
        f'<th class="text">{_e(h)}</th>' if i == 0 else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    return f'<table id="runs"><tr>{ths}</tr>{"".join(rows)}</table>'


def _total_tps(fleet: Mapping[str, Any]) -> float | None:
    """``fleet.total_tps``; for a report written before it, (prompt + output) / duration."""
    v = fleet.get("total_tps")
    if isinstance(v, int | float):
        return float(v)
    p, o, d = fleet.get("prompt_tokens"), fleet.get("output_tokens"), fleet.get("duration_s")
    if isinstance(p, int) and isinstance(o, int) and isinstance(d, int | float) and d > 0:
        return (p + o) / d
    return None


def _goodput_table(runs: Sequence[Run]) -> str:
    """One row per run and SLO (``goodput``): what met it, per second and as a share."""
    rows = []
    for r in runs:
        for g in r.report.get("goodput") or []:
            if not isinstance(g, Mapping):
                continue
            missed = {k: v for k, v in (g.get("failed_bounds") or {}).items() if v}
            cells = [
                f"{g.get('turns_met', '—')}/{g.get('turns', '—')}",
                _pct(g.get("turn_fraction")),
                _num(g.get("turns_per_s")),
                _num(g.get("output_tps")),
                f"{g.get('agents_met', '—')}/{g.get('agents', '—')}",
            ]
            rows.append(
                f'<tr><td class="text">{_e(r.label)}</td><td class="text">{_e(g.get("name"))}</td>'
                + "".join(f"<td>{_e(c)}</td>" for c in cells)
                + '<td class="text note">'
                + _e(", ".join(f"{k}: {v:,}" for k, v in missed.items()) or "—")
                + "</td></tr>"
            )
    if not rows:
        return ""
    head = (
        '<tr><th class="text">run</th><th class="text">SLO</th><th>turns met</th>'
        "<th>share</th><th>goodput req/s</th><th>goodput output tok/s</th>"
        '<th>rows met on every turn</th><th class="text">turns missing each bound</th></tr>'
    )
    return (
        '<h2 id="goodput">Goodput (turns meeting each SLO)</h2>'
        f'<table id="goodput-table">{head}{"".join(rows)}</table>'
    )


def _server_table(run: Run) -> str:
    """A run's server cross-check: its figures beside the client's, and the notes. With
    no figure compared (a resumed run's), the notes alone — they say why; nothing when
    the report has no server section."""
    server = run.server or {}
    rows = []
    for row in server.get("comparison") or []:
        c, s = row.get("client"), row.get("server")
        if isinstance(c, Mapping) or isinstance(s, Mapping):
            c, s = c or {}, s or {}
            for q in ("mean", "p50", "p99"):
                rows.append(
                    (
                        f"{row['figure']} {q} (ms)",
                        _num(c.get(q), 4, 1e3),
                        _num(s.get(q), 4, 1e3),
                        row.get("note", "") if q == "mean" else "",
                    )
                )
        elif row["figure"] == "cache_hit_rate":
            rows.append((row["figure"], _pct(c), _pct(s), row.get("note", "")))
        else:
            rows.append((row["figure"], _num(c, 6), _num(s, 6), row.get("note", "")))
    notes = "".join(f"<li>{_e(n)}</li>" for n in server.get("notes") or [])
    if not rows and not notes:
        return ""
    src = server.get("source") or {}
    body = "".join(
        f'<tr><td class="text">{_e(a)}</td><td>{_e(b)}</td><td>{_e(c)}</td>'
        f'<td class="text note">{_e(d)}</td></tr>'
        for a, b, c, d in rows
    )
    # No rows but notes (a resumed run's section compares nothing): the notes say why.
    table = (
        f'<table class="server"><tr><th class="text">figure</th><th>client</th>'
        f'<th>server</th><th class="text">how they differ</th></tr>{body}</table>'
        if rows
        else ""
    )
    return (
        f"<h3>{_e(run.label)}: {_e(src.get('dialect', '?'))} at {_e(src.get('url') or '?')}</h3>"
        f'{table}<ul class="note">{notes}</ul>'
    )


def _provenance(run: Run) -> str:
    p = run.report.get("provenance") or {}
    out = p.get("output_tokens") or {}
    usage = (out.get("server_usage") or {}).get("turns", 0)
    counted = (out.get("chunk_count") or {}).get("turns", 0)
    cached = (p.get("cached_tokens") or {}).get("reported_turns", 0)
    return (
        f"{_e(run.label)}: output tokens from the server's usage in {usage:,} turns, counted "
        f"from chunks in {counted:,}; cached tokens reported in {cached:,} turns."
    )


def _figure(f: Figure) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    return (
        f'<section class="figure" id="fig-{_e(f.key)}"><h2>{_e(f.title)}</h2>'
        f'<img src="data:image/png;base64,{data}" alt="{_e(f.alt)}" title="{_e(f.title)}">'
        f'<p class="caption">{_e(f.caption)}</p></section>'
    )


def render_html(runs: Sequence[Run], figures: Sequence[Figure], *, title: str) -> str:
    """The whole report page."""
    from agentflow._version import __version__

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">agentflow {_e(__version__)} · {_e(now)} · '
        f"{len(runs)} run{'s' if len(runs) != 1 else ''}: "
        + ", ".join(_e(r.label) + (f" ({_e(r.path)})" if r.path else "") for r in runs)
        + "</p>",
        "<h2>Runs</h2>",
        _runs_table(runs),
    ]
    goodput = _goodput_table(runs)
    if goodput:
        parts.append(goodput)
    warnings = [w for r in runs if (w := lag_warning(r))]
    parts += [f'<p class="warn">{_e(w)}</p>' for w in warnings]
    servers = [t for r in runs if (t := _server_table(r))]
    if servers:
        parts.append('<h2 id="server">Server cross-check (/metrics before and after)</h2>')
        parts += servers
    parts.append('<nav><h2>Figures</h2><ul id="contents">')
    parts += [f'<li><a href="#fig-{_e(f.key)}">{_e(f.title)}</a></li>' for f in figures]
    parts.append("</ul></nav>")
    parts += [_figure(f) for f in figures]
    parts.append('<h2>Token provenance</h2><ul class="note">')
    parts += [f"<li>{_provenance(r)}</li>" for r in runs]
    parts.append("</ul></body></html>")
    return "\n".join(parts) + "\n"
