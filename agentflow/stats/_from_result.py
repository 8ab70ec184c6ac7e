"""Stats built after the run from its :class:`~agentflow.FleetResult`
(:meth:`FleetStats.from_result <agentflow.stats.FleetStats.from_result>`).

Every finished turn of the result is folded in as a subscribed ``FleetStats`` would have
folded its ``TurnEndEvent``; what a result does not keep — when retries and errors
happened, tool durations and outcomes — comes from a :class:`~agentflow.stats.RunJournal`
subscribed to the run, when there is one, and is otherwise placed as well as the result
allows (see ``from_result``'s docstring).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from agentflow.stats._fleet_events import compaction, session_ended

if TYPE_CHECKING:
    from agentflow._fleet import FleetResult
    from agentflow.stats._fleet_stats import FleetStats
    from agentflow.stats._journal import RunJournal

__all__ = ["fill_from_result"]


def fill_from_result(
    stats: FleetStats,
    result: FleetResult,
    journal: RunJournal | None,
    unfinished: frozenset[str] = frozenset(),
) -> None:
    """Fold ``result`` (and ``journal``'s entries) into the fresh ``stats``; the sessions
    of ``unfinished`` (ids) had not ended: their turns count, not their status."""
    series = stats.series
    stats.tool_outcomes = journal is not None
    stats.compactions_seen = journal is not None and journal.compactions
    failed_at: dict[str | None, int] = {}
    # Retries the journal placed, per (session, turn): a turn's record places only the
    # failed attempts past those (the journal saw when each happened; the record only
    # knows an attempt's end, or without a byte received, the next attempt's send).
    noted: Counter[tuple[str | None, int | None]] = Counter()
    for e in journal.entries if journal is not None else ():
        if e.kind == "tool":
            row = stats._row(e.agent, e.session_id)
            row.tool_calls += 1
            stats.tool_calls += 1
            row.tool_s += e.duration_s
            stats.tool_s += e.duration_s
            if e.is_error:
                row.tool_errors += 1
                stats.tool_errors += 1
            stats._tool(e.where).add(e.duration_s, e.is_error)
        elif e.kind == "compaction":
            if e.trace is not None:
                compaction(stats, e.trace)
        elif e.kind == "retry":
            stats._row(e.agent, e.session_id).retries += 1
            series.add("retries", e.t_ns, 1)
            noted[e.session_id, e.turn] += 1
        elif e.where == "session":
            failed_at[e.session_id] = e.t_ns
        else:  # a tool or a callback that raised
            stats.errors[e.where] += 1
            series.add("errors", e.t_ns, 1)
    # When each session ended: its result's end, else its failure as the journal saw it,
    # else its last turn's end (a lower bound).
    ended = [
        (
            s.end_ns
            if s.end_ns is not None
            else failed_at.get(s.session_id, s.turns[-1].trace.end_ns if s.turns else None),
            s,
        )
        for s in result.sessions
    ]
    # In the order the sessions ended (unknown ends first), as a subscribed FleetStats sees
    # them: a per-agent row's session and status are then those of its last session.
    for at, s in sorted(ended, key=lambda e: (e[0] is not None, e[0] or 0)):
        row = stats._row(s.agent, s.session_id)
        for t in s.turns:
            stats.observe_turn(s.agent, s.session_id, t.index, t.metrics, t.trace, t.prompt)
            if journal is None:  # the calls asked for (a cancelled run ran fewer)
                calls = len(t.trace.tool_calls)
                stats.tool_calls += calls
                row.tool_calls += calls
            for a in t.failed_attempts[noted[s.session_id, t.index] :]:
                row.retries += 1
                series.add("retries", t.trace.sent_ns if a.trace is None else a.trace.end_ns, 1)
        if s.session_id in unfinished:
            stats.unfinished += 1
            continue
        session_ended(stats, s.agent, s.session_id, s, at)
        if s.status == "error":
            stats.errors["session"] += 1
            failed = failed_at.get(s.session_id, at)  # the journal's time, as subscribed
            if failed is not None:
                series.add("errors", failed, 1)
    if stats.fleet_start_ns is None:  # the origin, as a FleetStartEvent would give it
        stats.fleet_start_ns = getattr(result, "start_ns", None)
    stats.wall_s = result.wall_s
    stats.peak_in_flight = result.peak_in_flight
    stats.callback_errors = len(result.callback_errors) + getattr(
        result, "callback_errors_dropped", 0
    )
    stats.retries = getattr(result, "retries", 0)
    # A journal saw every callback ErrorEvent — unless given a store's record, which keeps
    # no callback failure (``RunJournal.callbacks``). Without one: with no callback failure
    # in the result there was no callback ErrorEvent, 0 is exact then.
    if journal is not None:
        stats.callback_outcomes = journal.callbacks
    else:
        stats.callback_outcomes = stats.callback_errors == 0
