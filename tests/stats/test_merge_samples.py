"""Samples of merged stats: a fresh ``FleetStats()`` merging workers that kept samples
reports every one of them; a merge missing some turn's row says so."""

from __future__ import annotations

import pickle

import pytest

from agentflow import ConfigError
from agentflow.stats import FleetStats
from tests.stats.traces import fixed_run


def worker(agent: str, *, keep_samples: bool) -> FleetStats:
    """One worker's stats, pickled and back, as a coordinator gets them."""
    stats = FleetStats(keep_samples=keep_samples)
    for event in fixed_run():
        if event.agent == agent:
            stats(event)
    got: FleetStats = pickle.loads(pickle.dumps(stats))
    return got


def test_fresh_stats_merging_workers_that_kept_samples_report_them() -> None:
    """The documented pattern raised "kept no per-turn rows" while holding all 4."""
    total = FleetStats()  # merging into a fresh FleetStats (docs/stats.md)
    total.merge(worker("a", keep_samples=True))
    total.merge(worker("b", keep_samples=True))
    assert total.keep_samples  # and a turn fed later is kept too
    report = total.report(include_samples=True)
    assert report["fleet"]["turns"] == 4
    rows = sorted((r["agent"], r["turn"]) for r in report["samples"])
    assert rows == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_merge_missing_some_turns_rows_is_a_config_error() -> None:
    total = FleetStats()
    total.merge(worker("a", keep_samples=True))
    total.merge(worker("b", keep_samples=False))
    assert len(total.samples) == 2
    with pytest.raises(ConfigError, match=r"only 2 of 4 turns kept a row"):
        total.report(include_samples=True)


def test_merge_of_workers_that_kept_none_is_a_config_error() -> None:
    total = FleetStats()
    total.merge(worker("a", keep_samples=False))
    assert not total.keep_samples
    with pytest.raises(ConfigError, match=r"include_samples=True.*keep_samples=True"):
        total.report(include_samples=True)
