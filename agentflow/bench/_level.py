"""One load level: run its scripts on a Fleet and measure them with FleetStats.

The fleet, its scheduler and the statistics are the library's own: the level's
sessions are :class:`~agentflow.bench._session.BenchSession` s given to
:meth:`Fleet.run <agentflow.Fleet.run>`, and a :class:`LevelTap` subscribed to the
fleet hands each event to a :class:`~agentflow.stats.FleetStats` — only the turns that
became ready inside the level's measurement window (after the warm-up, before the
end). The level's figures are read from that FleetStats' ``agentflow.report/2``
report, which the bench report keeps whole.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._events import ErrorEvent, Event, RetryEvent, SessionEndEvent, TurnEndEvent
from agentflow._fleet import Fleet, FleetResult
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow.bench._dist import _finite
from agentflow.bench._level_summary import level_summary, window_length
from agentflow.bench._load import CountedScripts, Load
from agentflow.bench._session import BenchRun, BenchSession
from agentflow.bench._spec import SessionScript
from agentflow.stats import SLO, FleetStats
from agentflow.stats._rows import ready_ns
from agentflow.typing import Clock

if TYPE_CHECKING:
    from agentflow.report._lag import LoopLagProbe

__all__ = ["LevelResult", "LevelTap", "Saturation", "run_level"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Saturation:
    """When a level counts as over-saturated: its latency or its backlog keeps growing.

    Attributes:
        ttft_growth: over-saturated when the median time from a turn being ready to its
            first token (queue wait + TTFT) in the window's last third is at least this
            many times the first third's …
        min_rise_s: … and at least this many seconds more (a few milliseconds more
            prefill, as contexts grow, is not a queue).
        backlog_growth: over-saturated when the turns waiting for their first token
            (ready, no output yet) grew over the window by at least this fraction of
            the turns that became ready in it — requests the server did not absorb.
        min_samples: turns each third needs for the TTFT trend to count.
    """

    ttft_growth: float = 2.0
    min_rise_s: float = 0.1
    backlog_growth: float = 0.05
    min_samples: int = 10

    def __post_init__(self) -> None:
        # Checked when built: a wrong one failed (or judged every level) only after a
        # level's turns had run, and its figures are copied into the report's JSON.
        growth = "a finite number ≥ 1"
        _finite("Saturation.ttft_growth", self.ttft_growth, growth, lambda x: x >= 1)
        check_seconds(self.min_rise_s, "Saturation.min_rise_s", 0, MAX_TIMEOUT_S)
        backlog = "a finite number ≥ 0"
        _finite("Saturation.backlog_growth", self.backlog_growth, backlog, lambda x: x >= 0)
        check_count(self.min_samples, "Saturation.min_samples")


class _Window:
    """Feeds a FleetStats the turns ready in ``[lo_ns, hi_ns)``, and the ends of the
    sessions that had such a turn or started in that window (``started_ns``: session
    id → start): a session that failed on its first turn has no turn to count, but its
    failure must show in the level's statuses. A turn's retries are held until it ends
    and passed on only if it counts (those of a turn that never ended, if its session
    does): a warm-up turn's retry used to count, and make a row of a session not in
    the window."""

    def __init__(
        self,
        stats: FleetStats,
        lo_ns: int,
        hi_ns: int,
        started_ns: Mapping[str, int] | None = None,
    ) -> None:
        self.stats = stats
        self.lo_ns = lo_ns
        self.hi_ns = hi_ns
        self.started_ns: Mapping[str, int] = started_ns if started_ns is not None else {}
        self.sessions: set[str] = set()
        #: (ready_ns, queue wait + TTFT in seconds) of each turn in the window.
        self.first_token: list[tuple[int, float]] = []
        #: (ready_ns, first output or end ns) of every finished turn, in the window or not.
        self.waits: list[tuple[int, int]] = []
        self.turns_outside = 0
        #: Retry events of turns not ended yet, by session id, then turn.
        self.retries: dict[str, dict[int, list[Event]]] = {}

    def observe(self, event: Event) -> None:
        if isinstance(event, TurnEndEvent):
            ready = ready_ns(event.metrics, event.trace)
            trace = event.trace
            first = trace.first_output_ns
            self.waits.append((ready, first if first is not None else trace.end_ns))
            held = self.retries.get(event.session_id)
            retries = held.pop(event.turn, ()) if held is not None else ()
            if not self.lo_ns <= ready < self.hi_ns:
                self.turns_outside += 1
                return
            self.sessions.add(event.session_id)
            m = event.metrics
            if m.ttft_s is not None:
                self.first_token.append((ready, m.queue_wait_s + m.ttft_s))
            for retry in retries:
                self.stats(retry)
            self.stats(event)
        elif isinstance(event, SessionEndEvent):
            sid = event.session_id
            start = self.started_ns.get(sid)
            unfinished = self.retries.pop(sid, {})
            if sid in self.sessions or (start is not None and self.lo_ns <= start < self.hi_ns):
                self.sessions.add(sid)
                for retries in unfinished.values():
                    for retry in retries:
                        self.stats(retry)
                self.stats(event)
        elif isinstance(event, RetryEvent):  # held until its turn ends: does it count?
            turns = self.retries.setdefault(event.session_id, {})
            turns.setdefault(event.turn, []).append(event)
        elif isinstance(event, ErrorEvent):
            self.stats(event)


class LevelTap:
    """A fleet callback that routes events to the current level's window (if any).

    Subscribe one to a :class:`~agentflow.Fleet` (``Fleet(callbacks=[tap])``) and reuse
    the fleet for every level; :func:`run_level` points it at each level's window.
    """

    #: Only these events reach it: the bus builds no token events for it.
    event_types: ClassVar[frozenset[str]] = frozenset({"turn_end", "session_end", "error", "retry"})

    def __init__(self) -> None:
        self._window: _Window | None = None
        #: The level a cancellation stopped (Ctrl-C, SIGTERM, a timeout around
        #: :func:`run_level`), measured up to then — ``summary["interrupted"]`` is true;
        #: ``None`` when the last level run was not cancelled.
        self.interrupted: LevelResult | None = None

    def __call__(self, event: Event) -> None:
        """Pass ``event`` to the current window."""
        if self._window is not None:
            self._window.observe(event)


@dataclass(slots=True, kw_only=True)
class LevelResult:
    """What one level measured.

    Attributes:
        load: the level.
        summary: its figures (see ``docs/bench.md``): JSON-able, no NaN.
        stats: the FleetStats of its measurement window.
        run: the shared state of its sessions (start and end times, counts).
        report: its ``agentflow.report/2`` report (of the measurement window).
        result: the fleet's result: every top-level session the level started (a
            concurrency level's too: each slot's sessions in the order they ran);
            ``None`` when the level was cancelled at the end of its drain time.
    """

    load: Load
    summary: dict[str, Any]
    stats: FleetStats
    run: BenchRun
    report: dict[str, Any] = field(default_factory=dict)
    result: FleetResult | None = None

    @property
    def saturated(self) -> bool:
        """Whether the level was over-saturated (see :class:`Saturation`)."""
        return bool(self.summary["saturation"]["saturated"])


async def run_level(
    fleet: Fleet,
    tap: LevelTap,
    scripts: Iterable[SessionScript],
    *,
    load: Load,
    model: str,
    params: Mapping[str, Any],
    duration_s: float | None,
    warmup_s: float = 0.0,
    drain_s: float = 60.0,
    slos: Sequence[SLO] = (),
    clock: Clock,
    saturation: Saturation = Saturation(),
    run_info: Mapping[str, Any] | None = None,
    lag: LoopLagProbe | None = None,
) -> LevelResult:
    """Run one level's ``scripts`` on ``fleet`` and measure it.

    Args:
        fleet: the fleet (its transport, scheduler, limits); ``tap`` subscribed to it.
        tap: the fleet's :class:`LevelTap`.
        scripts: the level's sessions (from :func:`~agentflow.bench.plan_sessions`, or a
            trace); for a concurrency level, any iterable (an endless
            ``SessionStream`` of ``agentflow.bench._load``), drawn as sessions end.
        load: the level; with ``concurrency``, that many sessions live at once: each
            that ends before the level's end is followed at once by the next script.
        model: the model to request.
        params: body fields of every request.
        duration_s: after this, no session starts and no turn is sent; ``None``: every
            script runs to its end.
        warmup_s: turns ready before this are left out of every figure.
        drain_s: after the end, how long turns in flight may take before the level is
            cancelled (their turns then count nowhere).
        slos: goodput is counted against these.
        clock: the fleet's clock (nanoseconds; the traces' clock).
        saturation: when the level counts as over-saturated.
        run_info: copied into the level report's ``run`` section.
        lag: a probe of the client's own event loop, run while the level runs: its
            summary goes to the report's ``run.loop_lag``, and a saturation verdict
            notes a client that lagged (its latencies then include its own delay).

    Raises:
        ConfigError: a concurrency level on a fleet with a run store (it records the
            sessions a run starts with, not those a slot starts later).
        asyncio.CancelledError: the level was cancelled (Ctrl-C, SIGTERM, a timeout
            around it): the fleet's sessions were cancelled and unwound, and
            ``tap.interrupted`` is the level measured up to then.
    """
    if load.concurrency is not None and fleet.store is not None:
        raise ConfigError(
            f"{load.label}: a concurrency level starts sessions as its slots free up, and "
            "a run store records only the sessions a run starts with; run it on a Fleet "
            "without a store (its result and events have every session)"
        )
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    c0 = clock()
    end = None if duration_s is None else t0 + duration_s
    run = BenchRun(model=model, params=params, t0=t0, end=end)
    hi_ns = c0 + round(duration_s * 1e9) if duration_s is not None else 2**62
    lo_ns = c0 + round(warmup_s * 1e9)
    stats = FleetStats(slos=slos, per="session", start_ns=lo_ns)
    window = _Window(stats, lo_ns, hi_ns, run.started_ns)
    tap._window = window
    feed: CountedScripts | None = None
    if load.concurrency is None:
        sessions = [BenchSession(s, run) for s in scripts]
    else:
        # Fixed concurrency: one session per slot; each is followed by the next script
        # the moment it ends, so the level holds ``concurrency`` sessions to its end.
        feed = CountedScripts(scripts)
        heads = list(itertools.islice(feed, load.concurrency))
        sessions = [BenchSession(s, run, successors=feed) for s in heads]
    me = asyncio.current_task()
    cancels = 0 if me is None else me.cancelling()
    tap.interrupted = None
    if lag is not None:
        lag.start()
    task = asyncio.create_task(fleet.run(sessions))
    result: FleetResult | None = None  # known when the run ended by itself
    cancel: asyncio.CancelledError | None = None  # ours, when this task was cancelled
    done: set[asyncio.Task[FleetResult]] = set()
    try:
        timeout = None if duration_s is None else duration_s + drain_s
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError as exc:
            cancel = exc
        drained = bool(done)
        if not done:
            task.cancel()
        try:
            result = await task  # the fleet's sessions unwind (cancelled: in order)
        except asyncio.CancelledError as exc:
            if me is not None and me.cancelling() > cancels:
                cancel = cancel or exc  # this task was cancelled, not only the fleet's
    finally:
        tap._window = None
        if lag is not None:
            lag.stop()
        if not task.done():
            task.cancel()
    elapsed = loop.time() - t0
    # Cancelled (Ctrl-C, SIGTERM, a caller's timeout): the window so far is measured,
    # left on the tap, and the cancellation goes on.
    interrupted = cancel is not None
    if interrupted:
        window.hi_ns = min(window.hi_ns, clock())
        if duration_s is not None:
            elapsed = min(elapsed, duration_s)
    planned, ran_out_s = len(sessions), None
    if feed is None:
        # Every planned session that did not start, whether the level's end came first
        # or a cancel did (sessions waiting for their start were cancelled uncounted).
        run.not_started = sum(s.session_id not in run.started_ns for s in sessions)
    else:
        planned = len(scripts) if isinstance(scripts, Sized) else feed.drawn
        run.not_started += planned - feed.drawn  # the scripts left at the level's end
        if duration_s is not None and feed.exhausted and drained and run.ends:
            last = max(run.ends) - t0
            ran_out_s = last if last < duration_s else None
    length_s = duration_s if duration_s is not None and not interrupted else elapsed
    # The level's rates are over its window (its loaded part, when a concurrency level
    # ran out of sessions), or until the last of its turns ended if that was later (an
    # over-saturated level's backlog served in the drain time): what the server did.
    # A FleetStats that never sees its fleet's end divides by warm-up end → last turn
    # end, which inflated the rates of a level whose turns ended well before its end.
    served_s = 0.0 if stats.last_ns is None else (stats.last_ns - lo_ns) / 1e9
    stats.fleet_start_ns = lo_ns
    stats.wall_s = max(window_length(length_s, warmup_s, ran_out_s), served_s)
    info = {**(run_info or {}), "level": load.label, "label": load.label}
    if lag is not None:
        info["loop_lag"] = lag.summary()
    report = stats.report(run=info, cdf_points=20)
    summary = level_summary(
        load=load,
        report=report,
        run=run,
        window=window,
        planned=planned,
        warmup_s=warmup_s,
        duration_s=length_s,
        drained=drained,
        cut=run.cut_top_level,
        ran_out_s=ran_out_s,
        saturation=saturation,
        peak_in_flight=None if result is None else result.peak_in_flight,
        interrupted=interrupted,
    )
    level = LevelResult(
        load=load, summary=summary, stats=stats, run=run, report=report, result=result
    )
    if cancel is not None:
        tap.interrupted = level
        raise cancel
    return level
