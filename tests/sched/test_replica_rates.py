"""A replica's own rate buckets never hold the dispatcher: a turn bigger than one
replica's token bucket overdraws it instead of being waited on, so the other replicas
keep taking turns, and a replica that can take the whole charge is preferred.

The dispatcher used to count a replica as having room once a bucket-full of the charge
fitted, then wait in that replica's bucket for the rest — holding the only dispatcher,
so every turn waited, with the other replicas idle. Virtual time: every wait is exact.
"""

from __future__ import annotations

import asyncio

from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Grant, Limits, Replica, Scheduler
from tests.sched.conftest import IdleTransport, ticket

_TOL = 1e-3


def _replica(name: str, tpm: float, max_in_flight: int | None = None) -> Replica:
    limits = Limits(tpm=tpm, burst_s=1.0, max_in_flight=max_in_flight)
    return Replica(transport=IdleTransport(name), name=name, limits=limits)


def test_an_oversized_turn_on_one_replica_holds_no_other_replica() -> None:
    """Both replicas: 10 tokens a second, a bucket of 10. A 100-token turn goes to
    ``east`` at once, overdrawing its bucket; four 2-token turns arriving 0.1 s later go
    to ``west`` then (they waited 9 s, ``west`` idle). ``east`` takes its next turn only
    once the 100 tokens have drained, when it would have after waiting for them first."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        east, west = _replica("east", 600.0), _replica("west", 600.0, max_in_flight=4)
        sched = Scheduler([east, west], clock=loop_clock, prefix_warmup=False)
        granted: dict[str, tuple[str, float]] = {}

        async def one(sid: str, tokens: int) -> Grant:
            grant = await sched.acquire(ticket(sid, prompt_tokens=tokens, max_output_tokens=0))
            granted[sid] = (grant.replica.name, loop.time())
            return grant

        first = asyncio.create_task(one("big", 100))
        await asyncio.sleep(0.1)
        small = await asyncio.gather(*(one(f"s{i}", 2) for i in range(4)))
        for i in range(4):
            name, at = granted[f"s{i}"]
            assert name == "west" and abs(at - 0.1) < _TOL, granted
        big = await first
        assert granted["big"] == ("east", 0.0)
        # west is full: the next turn waits for east, until 92 of its 100 tokens drained.
        nxt = await one("next", 2)
        name, at = granted["next"]
        assert name == "east" and abs(at - 9.2) < _TOL, granted
        rates = sched.replicas[0].rates
        assert rates is not None and rates.charged_tokens == 102
        for grant in (big, *small, nxt):
            sched.release(grant, used_tokens=None, ok=True)
        await sched.aclose()

    run_virtual(main())


def test_a_replica_that_takes_the_whole_charge_is_preferred() -> None:
    """``small`` has a bucket of 10 tokens, ``large`` one of 1,000; both are idle and
    ``small`` is listed first. A 100-token turn goes to ``large`` (its whole charge fits),
    at once — not to ``small``, which it would overdraw for 9 s."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sched = Scheduler(
            [_replica("small", 600.0), _replica("large", 60_000.0)],
            clock=loop_clock,
            prefix_warmup=False,
        )
        grant = await sched.acquire(ticket("big", prompt_tokens=90, max_output_tokens=10))
        assert grant.replica.name == "large" and loop.time() == 0.0
        after = await sched.acquire(ticket("next", prompt_tokens=5, max_output_tokens=5))
        assert after.replica.name == "small" and loop.time() == 0.0  # small was not drained
        for g in (grant, after):
            sched.release(g, used_tokens=None, ok=True)
        await sched.aclose()

    run_virtual(main())


def test_oversized_turns_on_one_replica_keep_its_long_run_rate() -> None:
    """One replica, 10 tokens a second, a bucket of 10: 30-token turns go one every 3 s
    (30 tokens / 10 a second), the first at once."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sched = Scheduler([_replica("only", 600.0)], clock=loop_clock, prefix_warmup=False)
        times = []
        for i in range(5):
            grant = await sched.acquire(ticket(f"s{i}", prompt_tokens=20, max_output_tokens=10))
            times.append(loop.time())
            sched.release(grant, used_tokens=None, ok=True)
        for got, want in zip(times, [0.0, 3.0, 6.0, 9.0, 12.0], strict=True):
            assert abs(got - want) < _TOL, times
        await sched.aclose()

    run_virtual(main())
