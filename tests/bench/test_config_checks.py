"""A benchmark's configuration is checked when it is built: a wrong value is a
:class:`ConfigError` naming it, not an AttributeError after a level's turns ran, nor a
negative drain time that reported every level over-saturated."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import ConfigError
from agentflow import bench as B
from agentflow.stats import SLO


def bad(value: Any) -> Any:
    """``value``, typed Any: the point is what happens when a caller passes it anyway."""
    return value


def _config(**kw: Any) -> B.BenchConfig:
    base: dict[str, Any] = {
        "workload": B.get_workload("agentic"),
        "levels": (B.Load(rate=0.5),),
        "duration_s": 5.0,
        "max_sessions": 2,
    }
    return B.BenchConfig(**{**base, **kw})


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: _config(drain_s=-1), r"bench: drain_s must be .* got -1$"),
        (lambda: _config(drain_s=float("nan")), r"bench: drain_s must be .* got nan$"),
        (lambda: _config(warmup_s="1"), r"bench: warmup_s must be .* got '1'$"),
        (lambda: _config(duration_s="5"), r"bench: duration_s must be .* got '5'$"),
        (
            lambda: _config(saturation={"ttft_growth": 3}),
            r"bench: saturation must be a Saturation, got \{'ttft_growth': 3\}",
        ),
        (lambda: _config(workload="agentic"), r"bench: workload must be a Workload .*'agentic'"),
        (lambda: _config(slos=("ttft<1",)), r"bench: slos\[0\] must be an SLO, got 'ttft<1'"),
        (lambda: _config(slos="ttft<1"), r"bench: slos must be a tuple of SLO, got 'ttft<1'"),
        (lambda: _config(levels=[1.0]), r"bench: levels\[0\] must be a Load, got 1\.0"),
        (lambda: _config(sweep=2.0), r"bench: sweep must be a Sweep or None, got 2\.0"),
        (lambda: B.Saturation(ttft_growth=float("nan")), r"Saturation\.ttft_growth .* got nan"),
        (lambda: B.Saturation(ttft_growth=bad("2")), r"Saturation\.ttft_growth .* got '2'"),
        (lambda: B.Saturation(min_rise_s=-1), r"Saturation\.min_rise_s .* got -1"),
        (lambda: B.Saturation(backlog_growth=-0.1), r"Saturation\.backlog_growth .* got -0\.1"),
        (lambda: B.Saturation(min_samples=0), r"Saturation\.min_samples .* got 0"),
        (lambda: B.LogNormal(mean=100, low=float("inf")), r"lognormal\.low .* got inf"),
        (lambda: B.LogNormal(mean=100, high=float("nan")), r"lognormal\.high .* got nan"),
        (lambda: B.LogNormal(mean=bad("100")), r"lognormal\.mean .* got '100'"),
        (lambda: B.Uniform(low=bad("1"), high=2), r"uniform\.low must be a finite number, got '1'"),
        (lambda: B.Zipf(low=bad("1")), r"zipf\.low must be an int, got '1'"),
        (lambda: B.Sweep(start=bad("x")), r"sweep start must be a finite number > 0, got 'x'"),
        (lambda: B.Sweep(start=1, factor=True), r"sweep factor .* got True"),
        (lambda: B.Load(rate=bad("x")), r"rate must be a finite number > 0 sessions/s, got 'x'"),
        (lambda: B.Load(scale=bad([2])), r"scale must be a finite number > 0, got \[2\]"),
    ],
)
def test_a_wrong_value_is_a_config_error_naming_it(build: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        build()


def test_good_values_still_pass() -> None:
    config = _config(
        drain_s=0,
        warmup_s=1,
        levels=[B.Load(rate=1), B.Load(rate=2.0)],
        slos=[SLO(ttft_s=1.0)],
        saturation=B.Saturation(ttft_growth=1, min_rise_s=0, backlog_growth=0),
    )
    assert [load.rate for load in config.level_loads()] == [1, 2.0]
    assert B.LogNormal(mean=2, low=0, high=10).high == 10
    assert B.Sweep(start=1, factor=2).factor == 2
