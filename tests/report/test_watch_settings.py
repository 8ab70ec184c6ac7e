"""``ServerWatch`` and ``LoopLagProbe`` refuse a setting they cannot work with when they
are made, with a ConfigError naming it: ``ServerWatch(interval_s=nan)`` was taken and then
took no sample during the run, and a str or None was a bare TypeError, a negative value a
plain ValueError without the class's name."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow.report import LoopLagProbe, ServerWatch

URL = "http://127.0.0.1:9/v1"

#: Wrong values, typed Any: the point is what happens when a caller passes them anyway.
NAN: Any = math.nan
INF: Any = math.inf
TEXT: Any = "1"
NONE: Any = None
TRUE: Any = True
HALF: Any = 2.5

BAD: dict[str, tuple[Callable[[], object], str]] = {
    "watch interval nan": (lambda: ServerWatch(URL, interval_s=NAN), "ServerWatch.interval_s"),
    "watch interval inf": (lambda: ServerWatch(URL, interval_s=INF), "ServerWatch.interval_s"),
    "watch interval < 0": (lambda: ServerWatch(URL, interval_s=-1), "ServerWatch.interval_s"),
    "watch interval str": (lambda: ServerWatch(URL, interval_s=TEXT), "ServerWatch.interval_s"),
    "watch interval bool": (lambda: ServerWatch(URL, interval_s=TRUE), "ServerWatch.interval_s"),
    "watch timeout None": (lambda: ServerWatch(URL, timeout_s=NONE), "ServerWatch.timeout_s"),
    "watch timeout nan": (lambda: ServerWatch(URL, timeout_s=NAN), "ServerWatch.timeout_s"),
    "watch samples 1": (lambda: ServerWatch(URL, max_samples=1), "ServerWatch.max_samples"),
    "watch samples 2.5": (lambda: ServerWatch(URL, max_samples=HALF), "ServerWatch.max_samples"),
    "lag interval 0": (lambda: LoopLagProbe(0), "LoopLagProbe.interval_s"),
    "lag interval nan": (lambda: LoopLagProbe(NAN), "LoopLagProbe.interval_s"),
    "lag interval str": (lambda: LoopLagProbe(TEXT), "LoopLagProbe.interval_s"),
    "lag interval bool": (lambda: LoopLagProbe(TRUE), "LoopLagProbe.interval_s"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_setting_it_cannot_work_with_is_a_config_error_naming_it(case: str) -> None:
    build, name = BAD[case]
    with pytest.raises(ConfigError, match=rf"^{name} must be "):
        build()


def test_the_config_error_is_still_a_value_error() -> None:
    """What was a ValueError still is one (ConfigError is both)."""
    with pytest.raises(ValueError, match="interval_s"):
        ServerWatch(URL, interval_s=-1)
    with pytest.raises(ValueError, match="interval_s"):
        LoopLagProbe(-0.5)


def test_what_they_could_work_with_is_taken() -> None:
    assert ServerWatch(URL, interval_s=0, timeout_s=1, max_samples=2).interval_s == 0
    assert LoopLagProbe(0.001).interval_s == 0.001
