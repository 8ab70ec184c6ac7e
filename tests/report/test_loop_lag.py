"""LoopLagProbe under a loop that a callback blocks, on virtual time (no wall clock)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow.embedded import VirtualTimeLoop, run_virtual
from agentflow.report import LoopLagProbe


def _block(loop: asyncio.AbstractEventLoop, seconds: float) -> None:
    """What a callback that holds the loop for ``seconds`` does to the (virtual) clock."""
    assert isinstance(loop, VirtualTimeLoop)
    loop._advance(seconds)


def test_a_blocked_loop_shows_in_the_samples_not_only_in_wakeup_late() -> None:
    """A callback held the loop 40 ms while the probe's timer was due: every read queued
    behind it waited that long, but the iteration the probe timed afterwards was short,
    so every sample read 0 and only ``wakeup_late`` saw the block. The sample now counts
    the timer's lateness (beyond 1 ms of timer rounding)."""

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        async with LoopLagProbe(interval_s=0.01, clock=loop.clock_ns) as probe:
            await asyncio.sleep(0.005)  # the first timer is due at 10 ms
            _block(loop, 0.040)  # it fires at 45 ms: 35 ms late
            await asyncio.sleep(0.3)  # ~25 more samples (virtual time)
        return probe.summary()

    s = run_virtual(main)
    assert s["count"] >= 20
    assert s["wakeup_late_p99_s"] == pytest.approx(0.035, rel=0.02)  # the sketch's 1 % error
    assert s["max_s"] == pytest.approx(0.034)  # 35 ms late, less 1 ms of timer rounding
    assert s["p99_s"] == pytest.approx(0.034, rel=0.02)
    assert s["p50_s"] == 0.0  # the other samples: an idle loop on virtual time


def test_timer_rounding_alone_is_not_lag() -> None:
    """Timers of an idle asyncio loop fire up to ~1 ms late (epoll waits in whole
    milliseconds): that lateness alone does not count as lag."""

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        async with LoopLagProbe(interval_s=0.01, clock=loop.clock_ns) as probe:
            await asyncio.sleep(0.005)
            _block(loop, 0.0059)  # the timer fires 0.9 ms late
            await asyncio.sleep(0.1)
        return probe.summary()

    s = run_virtual(main)
    assert s["max_s"] == 0.0 and s["wakeup_late_p99_s"] == pytest.approx(0.0009, rel=0.02)
