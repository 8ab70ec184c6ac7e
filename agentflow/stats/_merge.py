"""Merging stats built by several workers into the stats of the whole run.

Each worker (process, host, shard of agents) subscribes its own
:class:`~agentflow.stats.FleetStats`; the coordinator merges them — pickled across
processes, they are plain Python objects. Counters and sums add exactly, DDSketches
merge exactly (the merged bins equal those of one sketch fed every value), per-agent rows
with the same key combine, and time series add bucket by bucket. So the merged report
equals the single-process one up to float summation order, and every quantile is within
the sketches' relative accuracy of the true one.

What cannot be merged exactly is said so: the wall time becomes the longest worker's
(workers run side by side), or — when they did not start together — the span from the
earliest fleet start to the latest fleet end, or from the earliest turn's ready time to
the latest turn's end, if that is longer (on the shared clock below), and
``peak_in_flight`` becomes unknown (the peaks of different workers need not coincide;
the merged in-flight series shows the load).
Time series line up only on a shared clock: on one Linux host ``perf_counter_ns`` is
CLOCK_MONOTONIC, shared by every process; across hosts, give every worker's fleet and
transport a wall clock (``time.time_ns``) and the same ``start_ns``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentflow._errors import ConfigError
from agentflow.stats._agents import AgentStats

if TYPE_CHECKING:
    from agentflow.stats._fleet_stats import FleetStats

__all__ = ["check_mergeable", "merge_stats"]


def merge_stats(into: FleetStats, other: FleetStats) -> None:
    """Fold ``other`` into ``into`` (same α, SLOs, ``per``, ``bucket_s``, ``start_ns``,
    ``max_turn_index``, ``itl`` and quantiles).

    Raises:
        ConfigError: the two were built with different settings; ``into`` is unchanged.
    """
    check_mergeable(into, other)  # everything first: a refused merge changes nothing
    for name, sketch in other.sketches.items():
        into.sketches[name].merge(sketch)
    into.series.merge(other.series)
    into.by_turn.merge(other.by_turn)
    for key, row in other.agents.items():
        mine = into.agents.get(key)
        if mine is None:
            mine = into.agents[key] = AgentStats(row.agent, row.session_id, len(into.slos))
        mine.merge(row)
    into.samples.extend(other.samples)
    # A fresh FleetStats() merging workers that kept samples holds their samples: it
    # keeps them (and any turn it is fed later) too.
    into.keep_samples = into.keep_samples or other.keep_samples
    for name, figures in other.tools.items():
        into._tool(name).merge(figures)
    for name in (
        "turns", "output_tokens", "no_output_turns", "exact_chunk_turns", "prompt_tokens",
        "prompt_turns", "estimated_prompt_tokens", "estimated_prompt_turns",
        "cached_tokens", "cache_prompt_tokens", "cacheable_tokens",
        "cacheable_prompt_tokens", "reconnects", "tool_calls", "tool_errors", "tool_s",
        "callback_errors", "retries", "workers", "compactions", "compaction_output_tokens",
        "compaction_prompt_tokens", "compaction_prompt_requests", "compaction_cached_tokens",
        "compaction_cache_prompt_tokens", "compaction_s",
    ):  # fmt: skip
        setattr(into, name, getattr(into, name) + getattr(other, name))
    for src, (n, tokens) in other.output_by_source.items():
        mine_src = into.output_by_source[src]
        mine_src[0] += n
        mine_src[1] += tokens
    into.tool_outcomes = into.tool_outcomes and other.tool_outcomes  # else a partial sum
    into.callback_outcomes = into.callback_outcomes and other.callback_outcomes
    into.compactions_seen = into.compactions_seen and other.compactions_seen
    into.cached_sources.update(other.cached_sources)
    into.finish_reasons.update(other.finish_reasons)
    into.sessions.update(other.sessions)
    into.unfinished += getattr(other, "unfinished", 0)  # (stats pickled before it had one)
    into.errors.update(other.errors)
    into.slo_turns = [a + b for a, b in zip(into.slo_turns, other.slo_turns, strict=True)]
    into.slo_tokens = [a + b for a, b in zip(into.slo_tokens, other.slo_tokens, strict=True)]
    for mine_c, theirs in zip(into.slo_failed_bounds, other.slo_failed_bounds, strict=True):
        mine_c.update(theirs)
    spans = [_span(into), _span(other)]
    into.fleet_start_ns = _min(into.fleet_start_ns, other.fleet_start_ns)
    into.first_ns = _min(into.first_ns, other.first_ns)
    into.last_ns = _max(into.last_ns, other.last_ns)
    into.start_ns = _min(into.start_ns, other.start_ns)
    walls = [w for w in (into.wall_s, other.wall_s) if w is not None]
    if walls and into.first_ns is not None and into.last_ns is not None:
        walls.append((into.last_ns - into.first_ns) / 1e9)  # workers started apart
    if spans[0] is not None and spans[1] is not None and into.fleet_start_ns is not None:
        # both fleets' starts known: the first start to the last end
        walls.append((max(spans[0][1], spans[1][1]) - into.fleet_start_ns) / 1e9)
    into.wall_s = max(walls) if walls else None
    into.peak_in_flight = None


def check_mergeable(into: FleetStats, other: FleetStats) -> None:
    """Raise :class:`ConfigError` naming the first setting ``into`` and ``other`` differ in."""
    mine, theirs = into.series, other.series
    for what, a, b in (
        ("relative_accuracy", into.relative_accuracy, other.relative_accuracy),
        ("SLOs", [s.label for s in into.slos], [s.label for s in other.slos]),
        ("per", into.per, other.per),
        ("time buckets (start_ns anchor)", mine.anchor_ns, theirs.anchor_ns),
        ("time buckets (bucket_s, in ns)", mine.bucket_ns, theirs.bucket_ns),
        ("max_turn_index", into.by_turn.max_index, other.by_turn.max_index),
        ("itl", into.itl, other.itl),
        ("quantiles", into.quantiles, other.quantiles),
    ):
        if a != b:
            raise ConfigError(f"cannot merge stats of different {what}: {a!r} and {b!r}")


def _span(stats: FleetStats) -> tuple[int, int] | None:
    """The fleet's start and end on the trace clock, when both are known."""
    start, wall = stats.fleet_start_ns, stats.wall_s
    return None if start is None or wall is None else (start, start + round(wall * 1e9))


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
