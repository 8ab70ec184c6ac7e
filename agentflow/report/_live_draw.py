"""How :class:`~agentflow.report.LiveView` draws itself: the lines of one redraw.

``LiveView.render`` calls :func:`draw` a few times a second, on rich's refresh thread —
never on the hot path, which only folds events into the view's totals (``_live``). A
redraw reads those totals and the view's figures (``fleet_tps``, ``rolling``, ``ranked``,
``load``) and lays them out as lines of text: progress bars, the fleet line, the rolling
latencies, errors and retries, the loop lag, and the slowest and fastest agents.

rich (the ``demo`` extra) is imported when drawing, not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentflow._printable import printable

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

    from agentflow.report._live import LiveView

__all__ = ["BAR_WIDTH", "draw"]

_ROW = "{:<4} {:<24} {:>5} {:>9} {:>24} {:>9} {:>7}  {}"
#: The agents' rows on a terminal narrower than :data:`NARROW_BELOW` columns: shorter
#: names, decode speeds without their scaled-back value — 79 columns with a status of 9.
_ROW_NARROW = "{:<4} {:<16} {:>5} {:>9} {:>12} {:>9} {:>7}  {}"
#: Columns below which the agents' rows are :data:`_ROW_NARROW` (an 80-column terminal
#: cut :data:`_ROW`'s context, retries and status off).
NARROW_BELOW = 100

#: Characters of a progress bar.
BAR_WIDTH = 40


def draw(view: LiveView, window_s: float) -> RenderableType:
    """``view``'s current lines; ``window_s`` is the span of its rolling TTFT and TPOT
    (``LiveView.rolling``), for their label."""
    from rich.console import Group
    from rich.text import Text

    elapsed = view.clock() - view.started
    tps = view.fleet_tps()
    hit = (
        f"{view.cached_tokens / view.cache_prompt_tokens:.1%}"
        if view.cache_prompt_tokens
        else "not reported"
    )
    errors = sum(list(view.errors.values()))
    sessions = f"sessions {view.done}/{view.total_sessions}"
    if view.failed:
        sessions += f" (failed {view.failed})"
    total_turns = view.total_turns
    turns = f"turns {view.turns}" + (f"/{total_turns}" if total_turns else "")
    width = max(len(sessions), len(turns)) + 2
    console = view.console
    plain = console.no_color or console.color_system is None
    progress = [_bar_line(sessions, width, view.done, view.total_sessions, plain)]
    progress.append(
        _bar_line(turns, width, view.turns, total_turns, plain)
        if total_turns
        else Text(turns, style="bold")
    )
    in_flight, queued = view.load()
    fleet = f"fleet {_tps(tps, view.time_scale)} output tok/s · cache hit {hit} · {elapsed:,.1f} s"
    now = f"now: tools running {view.tools_running}"
    if in_flight is not None:
        now = f"now: in flight {in_flight} · queued {queued} · tools running {view.tools_running}"
    roll = view.rolling()
    latency = (
        f"last {window_s:g} s ({roll['turns']} turns): "
        f"TTFT p50 {_ms_fine(roll['ttft_p50_s'])} p90 {_ms_fine(roll['ttft_p90_s'])} · "
        f"TPOT p50 {_ms_fine(roll['tpot_p50_s'])} p90 {_ms_fine(roll['tpot_p90_s'])}"
    )
    lines: list[RenderableType] = [
        *progress,
        Text(fleet),
        Text(now),
        Text(latency),
        Text(f"errors {errors} · retries {view.retries}"),
    ]
    if view.lag is not None:
        worst = view.lag.take_window_max()
        lines.append(Text(f"event-loop lag (worst since last redraw) {worst * 1e3:,.2f} ms"))
    # Escaped again here (a no-op for what the view folded in itself): whatever was put
    # in these, a server's control characters must not reach the terminal.
    if view.last_error:
        lines.append(Text(f"last error: {printable(view.last_error)}", style="red"))
    if view.last_retry:
        lines.append(Text(f"last retry: {printable(view.last_retry)}", style="yellow"))
    slow, fast = view.ranked()
    # Plain aligned text, not a rich Table: a Table costs ~10 ms to lay out per
    # redraw; these lines cost well under 1 ms (tests/report/bench_live.py).
    narrow = view.console.width < NARROW_BELOW
    row, name_width, scale = (_ROW_NARROW, 16, 1.0) if narrow else (_ROW, 24, view.time_scale)
    rows = [
        row.format(
            "", "agent", "turns", "last TTFT", "decode tok/s", "context", "retries", "status"
        )
    ]
    for label, group in (("slow", slow), ("fast", fast)):
        for name, r in group:
            rows.append(
                row.format(
                    label,
                    name if len(name) <= name_width else name[: name_width - 1] + "…",
                    r.turns,
                    _ms(r.ttft_s),
                    _tps(r.decode_tps, scale),
                    "—" if r.context is None else f"{r.context:,}",
                    r.retries,
                    r.status,
                )
            )
    lines.append(Text("slowest and fastest agents (decode speed)", style="bold"))
    lines.append(Text("\n".join(rows), no_wrap=True, overflow="ellipsis"))
    return Group(*lines)


def _ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:,.0f} ms"


def _ms_fine(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:,.1f} ms"


def _bar_line(label: str, width: int, done: int, total: int | None, plain: bool = False) -> Text:
    """``label`` padded to ``width``, a bar of :data:`BAR_WIDTH` characters, the percentage.

    The bar's done part is green and the rest grey, in one character; ``plain`` (no
    colours: ``NO_COLOR``, a pipe) draws the rest in another (``─``), or an empty bar
    looked full."""
    from rich.text import Text

    total = max(1, total or 1)
    frac = min(1.0, done / total)
    filled = round(frac * BAR_WIDTH)
    return Text.assemble(
        (label.ljust(width), "bold"),
        ("━" * filled, "green"),
        (("─" if plain else "━") * (BAR_WIDTH - filled), "grey37"),
        f" {frac:>4.0%}",
    )


def _tps(tps: float, scale: float) -> str:
    return f"{tps:,.0f}" if scale == 1 else f"{tps:,.0f} (×{scale:g} = {tps * scale:,.0f})"
