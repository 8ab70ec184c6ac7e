"""``FleetStats(start_ns=…)`` is an int or ``None``, checked when the stats are made:
a float made every turn's update raise a TypeError (seen only in the run's
``callback_errors``: the stats were silently empty, and ``report()`` raised one more), a
str gave empty time series, and NaN was taken. A negative int is an origin like any
other: a resumed virtual run's trace clock starts below zero."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet
from agentflow.stats import FleetStats
from agentflow.testing import MockTransport, Reply

#: Wrong values, typed Any: the point is what happens when a caller passes them anyway.
BAD: list[Any] = [1.7e18, "123", math.nan, True]


@pytest.mark.parametrize("start_ns", BAD, ids=repr)
def test_a_start_that_is_not_an_int_of_nanoseconds_is_refused(start_ns: Any) -> None:
    with pytest.raises(
        ConfigError, match=r"FleetStats\.start_ns must be an int \(nanoseconds"
    ) as err:
        FleetStats(start_ns=start_ns)
    assert repr(start_ns) in str(err.value)


async def test_from_result_refuses_it_too() -> None:
    agent = Agent(name="a", model="m")
    result = await Fleet(MockTransport(lambda _: Reply.text("hi"))).run([agent.session("x")])
    with pytest.raises(ConfigError, match=r"FleetStats\.start_ns"):
        FleetStats.from_result(result, start_ns=0.5)


@pytest.mark.parametrize("start_ns", [None, 0, 123, -160_114_908])
async def test_a_start_that_is_one_is_taken_and_the_run_is_counted(start_ns: int | None) -> None:
    stats = FleetStats(start_ns=start_ns)
    agent = Agent(name="a", model="m")
    fleet = Fleet(MockTransport(lambda _: Reply.text("hello world")), callbacks=[stats])
    result = await fleet.run([agent.session("x")])
    assert result.callback_errors == []
    assert stats.turns == 1
    report = stats.report()
    assert report["fleet"]["completed"] == 1
    assert sum(report["throughput"]["output_tps"]) > 0
