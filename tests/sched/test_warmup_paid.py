"""A ticket that waited on the fleet's rate buckets is placed again once paid, and parks
like any other if its prefix is warming where it is placed; its charge is not taken again.

It went out instead, beside a leader that had no first token yet: the placement after the
payment skipped the warm-up's check.
"""

from __future__ import annotations

import asyncio

from agentflow import Limits, Replica
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router, Scheduler
from agentflow.sched._warmups import WARMING
from tests.sched.conftest import Acquirer, IdleTransport, settle, ticket


def test_a_paid_ticket_parks_behind_a_warming_leader_and_is_not_charged_again() -> None:
    async def main() -> None:
        reps = [
            Replica(transport=IdleTransport(n), limits=Limits(max_in_flight=4), name=n)
            for n in "AB"
        ]
        sched = Scheduler(
            reps,
            clock=loop_clock,
            router=Router(sticky=False, balance_slack=0),
            limits=Limits(rpm=600, burst_s=0.1),  # one request a bucket, 0.1 s to refill
            warmup_timeout_s=None,
        )
        a, b = sched.replicas
        acq = Acquirer(sched)

        async def go(sid: str, **kw: object) -> None:
            acq.submit(ticket(sid, **kw))  # type: ignore[arg-type]
            await asyncio.sleep(0.15)  # virtual time: the bucket refills
            await settle()

        await go("p0", prefix_key="P")  # leads P on A
        sched.warmed("P", a)
        acq.release("p0")
        await go("q", prompt_tokens=1000, prefix_key="Q")  # A
        await go("p1", prefix_key="P")  # B, the least loaded: leads P there
        acq.submit(ticket("r"))  # B; the bucket is empty now
        await settle()
        placed = {s: (g.replica.name, g.leader) for s, g in acq.grants.items()}
        assert placed == {"q": ("A", True), "p1": ("B", True), "r": ("B", False)}
        acq.submit(ticket("t", prefix_key="P"))  # placed on A (warm): waits on the bucket
        await settle()
        sched.hold(a, 10.0)  # meanwhile A asks for quiet, and B has room again
        acq.release("r")
        await asyncio.sleep(0.2)
        await settle()
        assert "t" not in acq.grants and sched.waiting == 1  # parked behind p1 on B
        assert sched._warm["P", "B"] == WARMING
        sched.warmed("P", b)
        await settle()  # no time passes: the bucket, empty, is not charged again
        assert (acq.grants["t"].replica.name, acq.grants["t"].leader) == ("B", False)
        for s in list(acq.grants):
            acq.release(s)
        await sched.aclose()

    run_virtual(main())
