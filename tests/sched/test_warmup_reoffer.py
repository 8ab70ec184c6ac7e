"""A slot freeing on a replica a prefix is warm on re-offers one parked ticket, not one per
warm prefix.

Every release re-placed the first ticket of each prefix group parked behind a leader
elsewhere whose prefix was warm on the replica: with many prefixes parked, one freed slot
re-placed them all (each but one parking again), at every release.
"""

from __future__ import annotations

from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router, Scheduler, Ticket
from agentflow.sched._replica import ReplicaState
from tests.sched.conftest import Acquirer, idle_replicas, settle, warm_on_a_parked_on_b


class CountingRouter(Router):
    """A router that counts the placements it is asked for."""

    def __init__(self) -> None:
        super().__init__(sticky=False)
        self.asked: list[str] = []

    def choose(self, ticket: Ticket, replicas: list[ReplicaState]) -> ReplicaState | None:
        self.asked.append(ticket.session_id)
        return super().choose(ticket, replicas)


def test_a_freed_slot_re_offers_one_parked_ticket() -> None:
    """P and Q warm on A (two slots, taken); each has a leader on B and a ticket parked
    behind it. One slot freeing on A places one of them again (P's, the first), which goes
    to A; Q's stays parked, not placed."""

    async def main() -> None:
        router = CountingRouter()
        sched = Scheduler(
            idle_replicas({"A": 2, "B": 8}), clock=loop_clock, router=router, warmup_timeout_s=5.0
        )
        a = sched.replicas[0]
        acq = Acquirer(sched)
        await warm_on_a_parked_on_b(sched, router, acq)  # both lead on A
        placed = {s: (g.replica.name, g.leader) for s, g in acq.grants.items()}
        assert placed == {
            "P0": ("A", True),
            "Q0": ("A", True),
            "P1": ("B", True),
            "Q1": ("B", True),
        }
        assert sched.waiting == 2

        router.asked.clear()
        acq.release("P0")
        await settle()
        assert router.asked == ["P2"]
        assert acq.grants["P2"].replica is a
        assert sched.waiting == 1
        for s in list(acq.grants):
            acq.release(s)
        await sched.aclose()

    run_virtual(main())
