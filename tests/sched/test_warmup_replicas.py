"""Prefix warm-up is per replica: a prefix warm on one server is cold on the others.

Each server has its own KV cache. A prefix warmed on replica A once released every
parked session, and the ones A had no room for went to cold replica B all at once, each
prefilling the same prefix there side by side. Now the first one placed on B leads B's
warm-up and the rest park again until it has its first token.
"""

from __future__ import annotations

from agentflow import Limits, Replica
from agentflow.embedded import loop_clock
from agentflow.sched import Router, Scheduler
from tests.sched.conftest import Acquirer, IdleTransport, settle, ticket


def _two_replicas(**kw: object) -> Scheduler:
    replicas = [
        Replica(transport=IdleTransport(name), limits=Limits(max_in_flight=2), name=name)
        for name in ("A", "B")
    ]
    return Scheduler(replicas, clock=loop_clock, router=Router(), **kw)  # type: ignore[arg-type]


def _placed(acq: Acquirer) -> list[tuple[str, str, bool]]:
    grants = {s: acq.tasks[s].result() for s in acq.order}  # (kept after a release)
    return [(s, g.replica.name, g.leader) for s, g in grants.items()]


async def test_the_overflow_of_a_warm_replica_leads_a_warm_up_on_the_next() -> None:
    """Two replicas of two slots, four sessions sharing prefix P: after A's leader has
    its first token, A takes one more; the next goes to B as B's leader, and the last
    waits for B's first token instead of prefilling P on B at the same time."""
    sched = _two_replicas()
    sched_a, sched_b = sched.replicas
    acq = Acquirer(sched)
    for i in range(4):
        acq.submit(ticket(f"s{i}", prefix_key="P"))
    await settle()
    assert _placed(acq) == [("s0", "A", True)] and sched.waiting == 3

    sched.warmed("P", sched_a)
    await settle()
    assert _placed(acq) == [("s0", "A", True), ("s1", "A", False), ("s2", "B", True)]
    assert sched.waiting == 1  # s3: P is warming on B

    sched.warmed("P", sched_b)
    await settle()
    assert _placed(acq)[3] == ("s3", "B", False) and sched.waiting == 0
    for sid in ("s0", "s1", "s2", "s3"):
        acq.release(sid)
    await sched.aclose()


async def test_a_leader_ending_on_one_replica_does_not_warm_another() -> None:
    """A's leader ends (P warm on A); A's follower ending too does not release the
    session parked behind B's leader: only B's leader does."""
    sched = _two_replicas()
    acq = Acquirer(sched)
    for i in range(5):
        acq.submit(ticket(f"s{i}", prefix_key="P"))
    await settle()
    acq.release("s0")  # A's leader ended
    await settle()
    assert _placed(acq)[1:] == [("s1", "A", False), ("s2", "A", False), ("s3", "B", True)]
    acq.release("s1")
    await settle()
    assert len(acq.order) == 4 and sched.waiting == 1  # s4 waits for B's leader
    acq.release("s3")
    await settle()
    assert acq.order[4] == "s4" and not acq.grants["s4"].leader and sched.waiting == 0
    for sid in ("s2", "s4"):
        acq.release(sid)
    await sched.aclose()
