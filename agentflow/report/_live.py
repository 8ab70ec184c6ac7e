"""The live terminal view of a running fleet (rich): :class:`LiveView`.

It is a fleet callback, so it runs inline where events are emitted — on the hot path.
It therefore does almost nothing per event: it reads no token events (its
``event_types`` are every type but ``token``, so the bus builds none for it; one given to
it directly returns after one string comparison); a turn end adds a few numbers to
counters and to the agent's row.
Everything else — the fleet's recent token rate, the slowest and fastest agents (a
``heapq`` pass over the rows), the table — is computed when the view is drawn, a few
times a second, by rich's refresh thread. ``tests/report/bench_live.py`` measures both
costs; ``docs/report.md`` gives the figures.

This module is the view's totals and figures; how a redraw lays them out is
``_live_draw`` (its names are importable from here, as before).

rich (the ``demo`` extra) is imported when a view is made, not with this module, so that
``agentflow.report`` — names, ``from agentflow.report import *`` — works without it.
"""

from __future__ import annotations

import heapq
import inspect
import logging
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, get_args

from agentflow._errors import ConfigError
from agentflow._events import (
    ErrorEvent,
    Event,
    RetryEvent,
    SessionEndEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
)
from agentflow._printable import printable
from agentflow._redact import error_line
from agentflow.report._lag import LoopLagProbe
from agentflow.report._live_draw import _ROW as _ROW
from agentflow.report._live_draw import BAR_WIDTH as BAR_WIDTH
from agentflow.report._live_draw import _bar_line as _bar_line
from agentflow.report._live_draw import _ms as _ms
from agentflow.report._live_draw import _ms_fine as _ms_fine
from agentflow.report._live_draw import _tps as _tps
from agentflow.report._live_draw import draw
from agentflow.stats._sketch import nearest_rank

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

    from agentflow._fleet import Fleet

__all__ = ["LiveView"]

_log = logging.getLogger("agentflow.report")

#: Seconds over which "fleet tok/s" is measured.
RATE_WINDOW_S = 5.0
#: Seconds over which the rolling TTFT and TPOT are taken (at most :data:`ROLLING_TURNS`).
ROLLING_WINDOW_S = 10.0
#: The most recent turns the rolling TTFT and TPOT keep.
ROLLING_TURNS = 512


class _Row:
    """One agent's running totals."""

    __slots__ = ("context", "decode_s", "decode_tokens", "retries", "status", "ttft_s", "turns")

    def __init__(self) -> None:
        self.turns = 0
        self.decode_tokens = 0
        self.decode_s = 0.0
        self.ttft_s: float | None = None
        self.context: int | None = None
        self.retries = 0
        self.status = "running"

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


class LiveView:
    """A fleet callback that keeps running totals and draws them with rich.

    Shows: progress bars of sessions and of turns (done / planned, when the number of
    turns is known); the fleet line — output tok/s over the last few seconds, requests
    in flight and queued (read from ``fleet`` at each redraw), tool calls running, the
    cache hit rate; the rolling TTFT and TPOT (p50, p90 of the turns that ended in the
    last :data:`ROLLING_WINDOW_S` seconds); errors and retries (with the latest of
    each); the event loop's lag (with a :class:`LoopLagProbe`); and the slowest and
    fastest agents by decode speed (output tokens after the first / the time they took).

    Args:
        total_sessions: sessions the run will start.
        total_turns: model turns the run is planned to take, when known (the demo knows
            them on its simulator); else the turns bar shows the count only.
        fleet: the fleet whose ``in_flight`` and ``queued`` to show (may be set later,
            as the attribute ``fleet``, once the fleet is built).
        time_scale: the simulator's time scale (decode speeds are also shown scaled back).
        console: where to draw.
        top: agents shown at each end of the speed ranking.
        refresh_per_second: redraws per second (by rich's refresh thread).
        lag: a running probe whose lag to show.
        clock: seconds, for elapsed time and rates.

    Raises:
        ConfigError: rich (the ``demo`` extra) is not installed.
    """

    #: The events it reads: every type but ``token`` (without it, token events were
    #: built for the view, one per streamed chunk, only to be dropped).
    event_types: ClassVar[frozenset[str]] = frozenset(
        inspect.signature(c).parameters["type"].default for c in get_args(Event)
    ) - {"token"}

    def __init__(
        self,
        total_sessions: int,
        *,
        total_turns: int | None = None,
        fleet: Fleet | None = None,
        time_scale: float = 1.0,
        console: Console | None = None,
        top: int = 4,
        refresh_per_second: float = 4.0,
        lag: LoopLagProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            from rich.console import Console
            from rich.text import Text
        except ImportError as exc:
            raise ConfigError(
                "the live view draws with rich, which is not installed: "
                "pip install 'agentflow[demo]'"
            ) from exc
        self.total_sessions = total_sessions
        self.total_turns = total_turns
        self.fleet = fleet
        self.time_scale = time_scale
        self.console = console or Console()
        self.top = top
        self.refresh_per_second = refresh_per_second
        self.lag = lag
        self.clock = clock
        self.started = clock()
        self.done = self.failed = self.turns = 0
        self.output_tokens = self.prompt_tokens = 0
        self.cached_tokens = self.cache_prompt_tokens = 0
        self.retries = 0
        self.last_retry: str | None = None
        self.errors: Counter[str] = Counter()
        self.last_error: str | None = None
        self.agents: dict[str, _Row] = {}
        self.tools_running = 0
        self._rate: deque[tuple[float, int]] = deque()
        #: (TTFT, TPOT) of the latest turns; stamped at redraw time (see :meth:`rolling`).
        self._recent: deque[tuple[float | None, float | None]] = deque(maxlen=ROLLING_TURNS)
        #: (clock, turns seen) at each :meth:`rolling` call of the last window.
        self._marks: deque[tuple[float, int]] = deque()
        #: What :meth:`_safe_render` shows when a redraw fails.
        self._last_view: RenderableType = Text("")
        self._render_errors = 0

    # ---- events (the hot path) -----------------------------------------------------

    def __call__(self, event: Event) -> None:
        """Fold one event into the totals."""
        if event.type == "token":
            return
        if isinstance(event, TurnEndEvent):
            m = event.metrics
            row = self.agents.get(event.agent)
            if row is None:
                row = self.agents[event.agent] = _Row()
            row.turns += 1
            self.turns += 1
            out = m.output_tokens
            self.output_tokens += out
            ttft = m.ttft_s
            row.ttft_s = ttft
            self._recent.append((ttft, m.tpot_s))
            if m.tpot_s is not None and ttft is not None:
                row.decode_tokens += m.decode_tokens
                row.decode_s += m.e2e_s - ttft
            p = m.prompt_tokens
            if p is not None:
                row.context = p
                self.prompt_tokens += p
                if m.cached_tokens is not None:
                    self.cached_tokens += m.cached_tokens
                    self.cache_prompt_tokens += p
        elif isinstance(event, SessionEndEvent):
            self.done += 1
            self.failed += not event.result.ok
            row = self.agents.get(event.agent)
            if row is None:
                row = self.agents[event.agent] = _Row()
            row.status = event.result.status
        elif isinstance(event, RetryEvent):
            self.retries += 1
            self.last_retry = f"{event.agent}: {type(event.attempt.error).__name__}"
            row = self.agents.get(event.agent)
            if row is None:  # its first turn may be the one retried
                row = self.agents[event.agent] = _Row()
            row.retries += 1
        elif isinstance(event, ToolCallEvent):
            self.tools_running += 1
        elif isinstance(event, ToolResultEvent):
            self.tools_running = max(0, self.tools_running - 1)
        elif isinstance(event, ErrorEvent):
            self.errors[event.where] += 1
            err = event.error
            who = event.agent or event.where
            # A server's text: its control characters escaped, so it cannot drive the terminal.
            self.last_error = printable(f"{who}: {error_line(err)}")[:120]

    # ---- drawing (a few times a second) -------------------------------------------

    def fleet_tps(self) -> float:
        """Output tokens per second over the last :data:`RATE_WINDOW_S` seconds."""
        now = self.clock()
        q = self._rate
        q.append((now, self.output_tokens))
        while len(q) > 2 and now - q[1][0] >= RATE_WINDOW_S:
            q.popleft()
        if len(q) < 2:
            elapsed = now - self.started
            return self.output_tokens / elapsed if elapsed > 0 else 0.0
        t0, n0 = q[0]
        return (self.output_tokens - n0) / (now - t0) if now > t0 else 0.0

    def ranked(self) -> tuple[list[tuple[str, _Row]], list[tuple[str, _Row]]]:
        """The ``top`` slowest and fastest agents by decode speed (slowest first in each).
        With ``2 * top`` agents or fewer, each agent is in one of them: the slower half
        (the middle one too, of an odd number) is the slowest, the faster half the fastest.

        Runs on rich's refresh thread while the loop's thread adds rows: it iterates a
        copy of the rows (``list()`` of a dict view runs in C, under the GIL, so the copy
        is taken at one instant), never the dict itself.
        """
        items = list(self.agents.items())
        agents = dict(items)
        speeds = [(r.decode_tokens / r.decode_s, a) for a, r in items if r.decode_s > 0]
        k = self.top
        if len(speeds) <= 2 * k:
            speeds.sort()
            half = (len(speeds) + 1) // 2  # (not ``top``: 4 of 5 agents were "slow")
            slow, fast = speeds[:half], speeds[half:]
        else:
            slow = heapq.nsmallest(k, speeds)
            fast = heapq.nlargest(k, speeds)
            fast.reverse()
        return [(a, agents[a]) for _, a in slow], [(a, agents[a]) for _, a in fast]

    def load(self) -> tuple[int | None, int | None]:
        """Requests in flight and turns queued for a slot now, from ``fleet`` (``None``
        without one)."""
        f = self.fleet
        if f is None:
            return None, None
        return f.in_flight, f.queued

    def rolling(self) -> dict[str, Any]:
        """p50 and p90 of TTFT and TPOT over the turns that ended in the last
        :data:`ROLLING_WINDOW_S` seconds (at most :data:`ROLLING_TURNS`), and how many.

        A turn's time is not read when it ends (the hot path calls no clock): the turns
        counted are those seen since the last call at least the window ago — so a turn
        counts for up to one redraw interval longer than the window.
        """
        now = self.clock()
        marks = self._marks
        marks.append((now, self.turns))
        since = now - ROLLING_WINDOW_S
        while len(marks) > 1 and marks[1][0] <= since:
            marks.popleft()
        base = marks[0][1] if marks[0][0] <= since else 0
        n = min(self.turns - base, len(self._recent))
        recent = list(self._recent)[len(self._recent) - n :]
        ttft = sorted(t for t, _ in recent if t is not None)
        tpot = sorted(t for _, t in recent if t is not None)
        return {
            "turns": n,
            "ttft_p50_s": _rank(ttft, 0.5),
            "ttft_p90_s": _rank(ttft, 0.9),
            "tpot_p50_s": _rank(tpot, 0.5),
            "tpot_p90_s": _rank(tpot, 0.9),
        }

    def render(self) -> RenderableType:
        """The current view (drawn by ``_live_draw``)."""
        return draw(self, ROLLING_WINDOW_S)

    def _safe_render(self) -> RenderableType:
        """:meth:`render`, but an error in it is logged and the last good view is shown.

        rich's refresh thread does not catch errors: one exception from a redraw would
        end the thread, and the view would freeze for the rest of the run without a word.
        """
        try:
            self._last_view = self.render()
        except Exception:
            self._render_errors += 1
            if self._render_errors == 1 or self._render_errors % 100 == 0:
                _log.exception("live view: redraw %d failed", self._render_errors)
        return self._last_view

    def live(self) -> Live:
        """A rich ``Live`` that redraws :meth:`render` ``refresh_per_second`` times a second
        (through :meth:`_safe_render`).

        What is written to ``sys.stderr`` meanwhile is printed above the view only when
        standard error is a terminal (it lands on the screen either way, and the view
        stays whole); otherwise (``2>file``) it goes to standard error, not into the
        view's output.

        Not on a terminal (a pipe, a log file) the view is drawn once, as it stops; what
        is printed next starts on a line of its own (rich ends the last line only on a
        terminal: the summary's title was glued to the view's last row)."""
        from rich.live import Live

        class _Live(Live):
            def stop(self) -> None:
                was = self.is_started  # (a second stop is rich's no-op: no second line)
                super().stop()
                if was and not self.console.is_terminal:  # (drawn once, as it stopped)
                    self.console.line()

        return _Live(
            get_renderable=self._safe_render,
            console=self.console,
            refresh_per_second=self.refresh_per_second,
            transient=False,
            redirect_stderr=_isatty(sys.stderr),
        )

    def snapshot(self) -> dict[str, Any]:
        """The totals as plain values (for tests and logs)."""
        return {
            "sessions_done": self.done,
            "sessions_failed": self.failed,
            "turns": self.turns,
            "output_tokens": self.output_tokens,
            "cache_hit_rate": (
                self.cached_tokens / self.cache_prompt_tokens if self.cache_prompt_tokens else None
            ),
            "errors": dict(self.errors),
            "retries": self.retries,
        }


def _isatty(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (``False`` for one without ``isatty``, or closed)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _rank(ordered: list[float], q: float) -> float | None:
    """The nearest-rank quantile ``q`` of sorted values (``None`` when empty)."""
    if not ordered:
        return None
    return ordered[nearest_rank(q, len(ordered))]
