"""``Scheduler.waiting`` (``Fleet.queued``) drops an ``acquire`` cancelled while queued
at once when nothing that still waits is ahead of it.

It used to count such a ticket until the dispatcher next woke (a release, a refill) and
found it at the head: with every queued ticket cancelled it stayed non-zero, and a
worker, which gives back spare slots only while nothing waits, kept them meanwhile.
"""

from __future__ import annotations

import asyncio

from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Limits, Replica, Scheduler
from tests.sched.conftest import IdleTransport, settle, ticket


def test_cancelled_acquires_leave_the_count_once_nothing_waits_ahead() -> None:
    async def main() -> None:
        sched = Scheduler(
            [Replica(transport=IdleTransport())],
            limits=Limits(max_in_flight=1),
            clock=loop_clock,
            prefix_warmup=False,
        )
        holder = await sched.acquire(ticket("holder"))
        head, *behind = [asyncio.create_task(sched.acquire(ticket(f"q{i}"))) for i in range(3)]
        await settle()
        assert sched.waiting == 3
        for task in behind:  # behind a ticket that still waits: counted until they reach it
            task.cancel()
        await settle()
        assert sched.waiting == 3
        head.cancel()  # nothing waits now
        await settle()
        assert sched.waiting == 0
        await asyncio.sleep(60.0)  # no release, no refill: nothing else would wake it
        assert sched.waiting == 0 and sched.in_flight == 1
        sched.release(holder, used_tokens=None, ok=True)
        assert all(t.cancelled() for t in (head, *behind)) and sched.dispatched == 1
        await sched.aclose()

    run_virtual(main())
