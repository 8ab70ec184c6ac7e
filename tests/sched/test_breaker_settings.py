"""``CircuitBreaker`` refuses a setting that is not a number in its range with a
ConfigError naming it: a str ``failure_rate`` was a bare ``TypeError: '<' not supported``,
a bool ``cooldown_s`` was taken as one second, and an infinite cooldown overflowed when
turned into nanoseconds."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow.sched import CircuitBreaker
from tests.sched.conftest import FakeClock

#: Wrong values, typed Any: the point is what happens when a caller passes them anyway.
BAD: list[tuple[str, Any]] = [
    ("failure_rate", "0.5"),
    ("failure_rate", True),
    ("failure_rate", math.nan),
    ("failure_rate", None),
    ("cooldown_s", True),
    ("cooldown_s", "5"),
    ("cooldown_s", math.nan),
    ("cooldown_s", math.inf),
    ("cooldown_s", 0),
    ("max_cooldown_s", False),
    ("max_cooldown_s", math.inf),
    ("max_cooldown_s", "60"),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_a_setting_that_is_not_a_number_in_range_is_a_config_error(name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"^CircuitBreaker\.{name} must be .*got {value!r}"):
        CircuitBreaker(FakeClock(), **{name: value})


def test_a_cooldown_over_its_cap_names_both() -> None:
    with pytest.raises(ConfigError, match=r"CircuitBreaker\.cooldown_s must be ≤ max_cooldown_s"):
        CircuitBreaker(FakeClock(), cooldown_s=10.0, max_cooldown_s=5.0)


def test_numbers_in_range_are_taken() -> None:
    b = CircuitBreaker(FakeClock(), failure_rate=1, cooldown_s=1, max_cooldown_s=1)
    assert b.failure_rate == 1
    assert b.opens_in_ns() == 0


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"breaker_cooldown_s": 2e9}, "breaker_cooldown_s"),
        ({"breaker_cooldown_s": 1e-10}, "breaker_cooldown_s"),
        ({"breaker_max_cooldown_s": 2e9}, "breaker_max_cooldown_s"),
    ],
    ids=repr,
)
def test_a_replica_refuses_what_its_breaker_would_refuse(
    settings: dict[str, float], field: str
) -> None:
    """Refused when the replica is made, not later when a run builds its breaker."""
    from agentflow import Replica
    from agentflow.testing import MockTransport, Reply

    with pytest.raises(ConfigError, match=rf"^Replica\.{field} must be"):
        Replica(transport=MockTransport(lambda _: Reply.text("hi")), **settings)  # type: ignore[arg-type]
