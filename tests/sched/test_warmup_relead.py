"""A prefix's leader that timed out no longer leads its warm-up: when it ends, the warm-up
of the leader that started after it on the same replica goes on.

The timed-out leader's failure (or cancellation) used to find the prefix warming there —
its successor's warm-up — and cool it: the successor's timer was cancelled, the tickets
parked behind it were placed again, and one of them led a third warm-up beside it.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Limits, Replica
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router, Scheduler
from tests.sched.conftest import Acquirer, IdleTransport, settle, ticket


@pytest.mark.parametrize("ok", [False, None])
def test_a_timed_out_leader_ending_leaves_the_next_leaders_warm_up(ok: bool | None) -> None:
    """L1 times out on A, L2 leads there anew and two followers park behind it; L1 then
    fails (or is cancelled): the followers stay parked (no second leader beside L2) until
    L2's first token releases them."""

    async def main() -> None:
        reps = [Replica(transport=IdleTransport("A"), limits=Limits(max_in_flight=8), name="A")]
        sched = Scheduler(reps, clock=loop_clock, router=Router(sticky=False), warmup_timeout_s=5.0)
        acq = Acquirer(sched)
        acq.submit(ticket("L1", prefix_key="P"))
        await settle()
        await asyncio.sleep(5.5)  # (virtual) L1 has no first token within the timeout
        await settle()
        acq.submit(ticket("L2", prefix_key="P"))
        await settle()
        for i in range(2):
            acq.submit(ticket(f"f{i}", prefix_key="P"))
            await settle()
        assert acq.grants["L2"].leader
        assert sched.waiting == 2

        acq.release("L1", ok=ok)
        await settle()
        assert sorted(acq.grants) == ["L2"]  # nobody led beside L2
        assert sched.waiting == 2

        sched.leader_token("P", sched.replicas[0])  # L2's first token
        await settle()
        assert sorted(acq.grants) == ["L2", "f0", "f1"]
        assert not any(acq.grants[s].leader for s in ("f0", "f1"))
        for s in list(acq.grants):
            acq.release(s)
        await sched.aclose()

    run_virtual(main())
