"""A prefix has one warm-up in progress at a time beyond the replica it is warm on.

With three replicas, P warm on a full A: the first overflow ticket led on B and the
prefix's affinity stayed on A (warm); the next found A full and went to the least-loaded
replica, C, cold too — a second leader prefilling P while B's was under way, and so on
for every cold replica.
"""

from __future__ import annotations

from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router, Scheduler
from tests.sched.conftest import Acquirer, idle_replicas, settle, ticket


def test_the_overflow_of_a_warm_prefix_leads_on_one_cold_replica_at_a_time() -> None:
    """P warm on A (one slot, taken): f0 leads on B, f1-f3 park behind it rather than lead
    on C; B's first token places them again, and at most one leads (on C)."""

    async def main() -> None:
        reps = idle_replicas({"A": 1, "B": 8, "C": 8})
        sched = Scheduler(reps, clock=loop_clock, router=Router(sticky=False), warmup_timeout_s=5.0)
        acq = Acquirer(sched)
        acq.submit(ticket("lead", prefix_key="P"))
        await settle()
        sched.warmed("P", sched.replicas[0])
        for i in range(4):
            acq.submit(ticket(f"f{i}", prefix_key="P"))
            await settle()
        placed = {s: (g.replica.name, g.leader) for s, g in acq.grants.items()}
        assert placed == {"lead": ("A", True), "f0": ("B", True)}
        assert sched.waiting == 3

        sched.leader_token("P", sched.replicas[1])  # f0's first token
        await settle()
        placed = {s: (g.replica.name, g.leader) for s, g in acq.grants.items()}
        assert sched.waiting == 0
        assert sum(placed[s][1] for s in ("f1", "f2", "f3")) <= 1
        for s in list(acq.grants):
            acq.release(s)
        await sched.aclose()

    run_virtual(main())
