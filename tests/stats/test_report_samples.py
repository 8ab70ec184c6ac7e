"""report(include_samples=True) of stats that kept no samples."""

from __future__ import annotations

import pytest

from agentflow import ConfigError
from agentflow.stats import FleetStats
from tests.stats.traces import fixed_run


def fed(*, keep_samples: bool = False) -> FleetStats:
    stats = FleetStats(keep_samples=keep_samples)
    for event in fixed_run():
        stats(event)
    return stats


def test_samples_asked_of_stats_that_kept_none_is_a_config_error() -> None:
    """It gave "samples": [] beside 4 turns — read as a run without turns."""
    stats = fed()
    assert stats.turns == 4
    with pytest.raises(ConfigError, match=r"include_samples=True.*keep_samples=True"):
        stats.report(include_samples=True)
    assert "samples" not in stats.report()  # not asked: no key, no error


def test_samples_of_stats_that_kept_them() -> None:
    report = fed(keep_samples=True).report(include_samples=True)
    assert len(report["samples"]) == report["fleet"]["turns"] == 4
