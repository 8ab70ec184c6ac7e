"""What :class:`~agentflow.stats.FleetStats` does with every event but a turn's end.

Tool results, session ends, errors, retries, compactions and the fleet's start and end are
rare next to turns (and tokens, which the stats skip at once), so they are folded here, one
call away from ``FleetStats.__call__``, which keeps the turn's hot path inline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentflow._context_events import CompactionEvent
from agentflow._events import (
    ErrorEvent,
    Event,
    FleetEndEvent,
    FleetStartEvent,
    SessionEndEvent,
    ToolResultEvent,
)
from agentflow._metrics import turn_metrics
from agentflow._redact import error_line

if TYPE_CHECKING:
    from agentflow._session import SessionResult
    from agentflow._trace import TurnTrace
    from agentflow.stats._fleet_stats import FleetStats
    from agentflow.stats._timeseries import TimeSeries

__all__ = ["compaction", "fold_event", "session_ended", "spread_request"]


def fold_event(stats: FleetStats, event: Event) -> None:
    """Fold one event other than a token or a turn end into ``stats``."""
    if isinstance(event, ToolResultEvent):
        row = stats._row(event.agent, event.session_id)
        row.tool_calls += 1
        row.tool_s += event.duration_s
        stats.tool_calls += 1
        stats.tool_s += event.duration_s
        if event.is_error:
            row.tool_errors += 1
            stats.tool_errors += 1
        stats._tool(event.name).add(event.duration_s, event.is_error)
    elif isinstance(event, SessionEndEvent):
        # when: the result's end (the fleet's clock), else the stats' clock, else the
        # latest turn end seen (a lower bound: the session ended after every turn seen)
        at = event.result.end_ns
        if at is None:
            at = stats.clock() if stats.clock is not None else stats.last_ns
        session_ended(stats, event.agent, event.session_id, event.result, at)
    elif isinstance(event, ErrorEvent):
        stats.errors[event.where] += 1
        _at(stats, "errors", None)
    elif event.type == "retry":  # a failed attempt that will be sent again
        stats.retries += 1
        stats._row(getattr(event, "agent", None), getattr(event, "session_id", None)).retries += 1
        trace = getattr(getattr(event, "attempt", None), "trace", None)
        _at(stats, "retries", None if trace is None else trace.end_ns)
    elif isinstance(event, CompactionEvent):
        compaction(stats, event.trace)
    elif isinstance(event, FleetStartEvent):
        start = stats.fleet_start_ns
        stats.fleet_start_ns = event.start_ns if start is None else min(start, event.start_ns)
    elif isinstance(event, FleetEndEvent):
        result = event.result
        # A recorded run's result without a start is a resumed run's: its wall_s sums
        # every attempt, where the events these stats saw are this attempt's.
        if result.run_id is None or result.start_ns is not None:
            stats.wall_s = result.wall_s
        stats.peak_in_flight = result.peak_in_flight
        stats.callback_errors = len(result.callback_errors) + result.callback_errors_dropped


def compaction(stats: FleetStats, trace: TurnTrace) -> None:
    """Count a context policy's summary request (``CompactionEvent.trace``): no turn, but
    the server's work all the same — its tokens go in the fleet's token totals and their
    time series (``fleet.compaction`` has them apart), not in any per-turn figure."""
    m = turn_metrics(trace)  # its tokens as a turn's are counted (rare: a few per session)
    stats.compactions += 1
    stats.compaction_s += m.e2e_s
    out, p, c = m.output_tokens, m.prompt_tokens, m.cached_tokens
    stats.compaction_output_tokens += out
    sent, end, first = trace.sent_ns, trace.end_ns, trace.first_output_ns
    if p is not None:
        stats.compaction_prompt_tokens += p
        stats.compaction_prompt_requests += 1
        if c is not None:
            stats.compaction_cached_tokens += c
            stats.compaction_cache_prompt_tokens += p
    spread_request(stats.series, sent, first, end, p, c, out, m.hidden_reasoning_tokens)
    if stats.last_ns is None or end > stats.last_ns:
        stats.last_ns = end


def spread_request(
    ts: TimeSeries,
    sent: int,
    first: int | None,
    end: int,
    prompt: int | None,
    cached: int | None,
    out: int,
    hidden: int,
) -> None:
    """A model request's work over time (a turn's, a compaction's): its prompt (and cached)
    tokens over its prefill, sent → first output chunk (or the end, with none); its output
    tokens over its decode, first chunk → end — reasoning it never streamed (``hidden``)
    before the first chunk, all of it over sent → end with no chunk; its time in flight."""
    prefilled = end if first is None else first
    if prompt is not None:
        if cached is not None:
            prefill: tuple[tuple[str, float], ...] = (
                ("prompt_tokens", prompt),
                ("cached_tokens", cached),
                ("cache_prompt_tokens", prompt),
            )
        else:
            prefill = (("prompt_tokens", prompt),)
        ts.spread_many(sent, prefilled, prefill)
    if out:
        if first is None:  # no output chunk (usage only: hidden reasoning): over it all
            ts.spread("output_tokens", sent, end, out)
        elif hidden:  # reasoning never streamed was decoded before the first chunk
            ts.spread("output_tokens", sent, first, hidden)
            ts.spread("output_tokens", first, end, out - hidden)
        else:
            ts.spread("output_tokens", first, end, out)
    ts.spread("in_flight_s", sent, end, (end - sent) / 1e9)


def session_ended(
    stats: FleetStats,
    agent: str,
    session_id: str,
    result: SessionResult,
    at_ns: int | None,
) -> None:
    """Count a session that ended at ``at_ns`` (``None``: unknown), on the fleet and on its
    row. The row shows the status of the session that ended last (one whose end is unknown
    only until one whose end is known)."""
    row = stats._row(agent, session_id)
    row.sessions += 1
    row.sessions_ok += result.status == "completed"
    if row.ended_ns is None or (at_ns is not None and at_ns >= row.ended_ns):
        row.status = result.status
        row.error = None if result.error is None else _error_text(result.error)
        row.ended_ns = at_ns
    stats.sessions[result.status] += 1


def _at(stats: FleetStats, name: str, t_ns: int | None) -> None:
    """Count one event of series ``name`` at the clock's time, else at ``t_ns``, else
    at the latest turn end seen (not placed before any turn ended)."""
    t = stats.clock() if stats.clock is not None else t_ns
    if t is None:
        t = stats.last_ns
    if t is not None:
        stats.series.add(name, t, 1.0)


def _error_text(error: BaseException) -> str:
    text = error_line(error)
    return text if len(text) <= 300 else text[:299] + "…"
