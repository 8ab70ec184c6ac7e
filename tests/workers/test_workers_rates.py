"""RPM across workers after an idle spell: no worker sends budget it was leased before
the idle spell on top of what the bucket refilled meanwhile (the broker grants exactly
what the request about to go out needs)."""

from __future__ import annotations

from agentflow import Fleet, HTTPTransport, Limits
from tests.sched.conftest import RecordingSim, max_in_window
from tests.workers.tools import idle_then_burst


async def test_rpm_holds_when_a_worker_bursts_after_an_idle_spell() -> None:
    """rpm=1,200 (20 a second, a 1 s burst), two workers: one session first, then 41
    that each wait 2.5 s before their first request, so the bucket is full again when
    they all go. In every window the server received at most rate × window + burst
    requests (with a spare-budget lease it saw 24 in 50 ms, where 21 are allowed)."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=64, workers=2, limits=Limits(rpm=1200))
        result = await fleet.run(idle_then_burst(41, 2.5))
    assert not result.failed
    arrivals = [r.arrival_s for r in sim.records]
    assert len(arrivals) == 42
    for window_s in (0.0, 0.05, 0.25, 0.5, 1.0, 2.0):
        # + 1: the limit holds on the client's clock; arrival at the server adds a transit
        # delay that varies (a loaded machine), which can bring one request closer.
        assert max_in_window(arrivals, window_s) <= 20 * window_s + 20 + 1
