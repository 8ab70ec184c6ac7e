"""The dispatcher's wait on the fleet's rate buckets, for the ticket at the head.

The head ticket's replica is chosen, and its grant counted in flight, only once its charge
is paid: a replica whose breaker opened during the wait gets nothing, and the ticket
waiting is not counted as a stream (``in_flight`` and the peaks). Run on
:func:`~agentflow.embedded.run_virtual`: the bucket refills on the loop's clock, and the
assertions are on where a grant went and on counts, not on durations.
"""

from __future__ import annotations

import asyncio
import dataclasses

from agentflow import Agent, Fleet, Limits
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Replica, Scheduler
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest
from tests.sched.conftest import Acquirer, IdleTransport, peak_overlap, settle, ticket
from tests.wait import GUARD_S

_NS = 1_000_000_000


def _two_replicas() -> Scheduler:
    """``r1`` (its breaker opens at its first failure) and ``r2``, behind a fleet-wide
    ``rpm`` of 60 with a bucket of one request."""
    r1 = Replica(transport=IdleTransport("r1"), name="r1", breaker_threshold=1, breaker_window=1)
    r2 = Replica(transport=IdleTransport("r2"), name="r2")
    return Scheduler(
        [r1, r2], limits=Limits(rpm=60, burst_s=1.0), clock=loop_clock, prefix_warmup=False
    )


def test_a_breaker_that_opens_during_the_bucket_wait_is_seen() -> None:
    """``s1`` takes the bucket's one request and goes to ``r1``; ``s2`` shares its prefix
    (so ``r1`` is its replica too) and waits 1 s for the bucket. Meanwhile ``s1`` fails
    and ``r1``'s breaker opens: ``s2`` goes to ``r2``, not to the open ``r1``."""

    async def main() -> None:
        sched = _two_replicas()
        first = await sched.acquire(ticket("s1", prefix_key="p"))
        assert first.replica.name == "r1"
        acq = Acquirer(sched)
        task = acq.submit(ticket("s2", prefix_key="p"))
        await settle()  # s2 popped: the dispatcher waits on the fleet's bucket
        assert not task.done()
        sched.release(first, used_tokens=None, ok=False)
        r1, r2 = sched.replicas
        assert r1.breaker.state == "open"
        grant = await asyncio.wait_for(task, GUARD_S)
        assert grant.replica is r2 and r1.in_flight == 0
        sched.release(grant, used_tokens=None, ok=True)
        assert r2.served == 1 and r1.failures == 1
        await sched.aclose()

    run_virtual(main())


def test_a_paid_ticket_with_nowhere_to_go_waits_at_the_head_without_paying_again() -> None:
    """A bucket of two requests, one a second. ``s0`` fills ``r1`` (a cap of 1), ``s1``
    goes to ``r2``; ``s2`` is placed on ``r2`` and waits for the bucket. At 0.5 s ``s1``
    fails and ``r2``'s breaker opens, so once paid (1 s) ``s2`` has nowhere to go. It
    waits at the head, and goes to ``r1`` the moment ``s0`` ends (1.5 s), without being
    charged again (the bucket holds half a request then); ``s3``, queued behind, waits."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        r1 = Replica(transport=IdleTransport("r1"), name="r1", limits=Limits(max_in_flight=1))
        r2 = Replica(
            transport=IdleTransport("r2"), name="r2", breaker_threshold=1, breaker_window=1
        )
        sched = Scheduler(
            [r1, r2], limits=Limits(rpm=60, burst_s=2.0), clock=loop_clock, prefix_warmup=False
        )
        s0 = await sched.acquire(ticket("s0"))
        s1 = await sched.acquire(ticket("s1"))
        assert (s0.replica.name, s1.replica.name) == ("r1", "r2")
        acq = Acquirer(sched)
        task = acq.submit(ticket("s2"))
        await asyncio.sleep(0.5)
        later = acq.submit(ticket("s3"))
        sched.release(s1, used_tokens=None, ok=False)
        assert sched.replicas[1].breaker.state == "open"
        await asyncio.sleep(1.0)
        assert not task.done() and not later.done()
        sched.release(s0, used_tokens=None, ok=True)
        grant = await asyncio.wait_for(task, GUARD_S)
        assert grant.replica.name == "r1" and 1.5 <= loop.time() <= 1.5 + 1e-3
        assert not later.done() and acq.order == ["s2"]
        sched.release(grant, used_tokens=None, ok=True)
        await asyncio.wait_for(later, GUARD_S)
        assert acq.order == ["s2", "s3"]
        await sched.aclose()

    run_virtual(main())


def test_the_ticket_waiting_on_the_bucket_is_not_in_flight() -> None:
    """While ``s2`` waits for the fleet's bucket, only ``s1`` streams: the scheduler (and
    so ``Fleet.in_flight``) and the replicas count one request in flight, not two; ``s2``
    counts as waiting (``Fleet.queued``), and its slot as claimed (a worker keeps it)."""

    async def main() -> None:
        sched = _two_replicas()
        first = await sched.acquire(ticket("s1"))
        task = Acquirer(sched).submit(ticket("s2"))
        await settle()
        assert not task.done()
        assert sched.in_flight == sched.peak_in_flight == 1
        assert sched.waiting == 1 and sched.claimed == 2
        assert [r.in_flight for r in sched.replicas] == [1, 0]
        assert max(r.peak_in_flight for r in sched.replicas) == 1
        grant = await asyncio.wait_for(task, GUARD_S)
        assert sched.in_flight == sched.claimed == 2 and sched.waiting == 0
        for g in (first, grant):
            sched.release(g, used_tokens=None, ok=True)
        await sched.aclose()

    run_virtual(main())


def test_peak_in_flight_counts_open_streams_under_a_fleet_rpm() -> None:
    """rpm = 60 with a bucket of one request: a request goes out every second, and each
    streams for 1.25 s, so at most two streams are ever open at once. The fleet's and the
    replica's ``peak_in_flight`` say 2 — the ticket held on the bucket made it 3."""

    def handler(request: ChatRequest) -> Reply:
        return dataclasses.replace(Reply.text("ok"), frame_delay_s=0.3125)  # 4 gaps: 1.25 s

    async def main() -> None:
        fleet = Fleet(
            MockTransport(handler, clock=loop_clock),
            limits=Limits(rpm=60, burst_s=1.0),
            clock=loop_clock,
            sleep=asyncio.sleep,
            probe_slots=False,
        )
        agent = Agent(name="a", model="m")
        result = await fleet.run([agent.session(f"t{i}") for i in range(8)])
        spans = []
        for s in result.sessions:
            assert s.ok
            for t in s.turns:
                assert t.trace.sent_ns is not None and t.trace.end_ns is not None
                spans.append((t.trace.sent_ns / _NS, t.trace.end_ns / _NS))
        assert len(spans) == 8
        assert min(end - start for start, end in spans) > 1.0  # the streams do overlap
        assert peak_overlap(spans) == 2
        assert result.peak_in_flight == result.replicas[0].peak_in_flight == 2
        assert fleet.in_flight == 0

    run_virtual(main())
