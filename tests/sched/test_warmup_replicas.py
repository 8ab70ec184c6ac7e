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
    """A's leader ends (P warm on A); that does not warm P on B: the session parked
    behind B's leader stays parked while A is full. When A's follower ends, A (warm)
    has room and takes it, not waiting for B's leader (P is still warming on B)."""
    sched = _two_replicas()
    acq = Acquirer(sched)
    for i in range(5):
        acq.submit(ticket(f"s{i}", prefix_key="P"))
    await settle()
    acq.release("s0")  # A's leader ended
    await settle()
    assert _placed(acq)[1:] == [("s1", "A", False), ("s2", "A", False), ("s3", "B", True)]
    assert len(acq.order) == 4 and sched.waiting == 1  # s4 waits for B's leader
    acq.release("s1")
    await settle()
    assert _placed(acq)[4] == ("s4", "A", False) and sched.waiting == 0
    assert sched._warm["P", "B"] == 1  # WARMING: A's slot did not warm B
    for sid in ("s2", "s3", "s4"):
        acq.release(sid)
    await sched.aclose()


async def test_sessions_do_not_wait_on_a_cold_replica_while_the_warm_one_has_room() -> None:
    """B's leader (A was full) does not draw P's new sessions away from A, where P is
    warm: when A empties, the session parked behind B's leader goes to A, and a new
    session of P goes to A too instead of parking behind B's leader."""
    sched = _two_replicas(warmup_timeout_s=None)
    a, b = sched.replicas
    acq = Acquirer(sched)
    for i in range(4):
        acq.submit(ticket(f"s{i}", prefix_key="P"))
    await settle()
    sched.warmed("P", a)
    await settle()
    assert _placed(acq) == [("s0", "A", True), ("s1", "A", False), ("s2", "B", True)]
    assert sched.waiting == 1 and sched.router.affinity("P") is a  # s3 behind B's leader
    acq.release("s1")
    acq.release("s0")
    await settle()
    assert _placed(acq)[3] == ("s3", "A", False) and sched.waiting == 0
    acq.submit(ticket("s4", prefix_key="P"))
    await settle()
    assert _placed(acq)[4] == ("s4", "A", False) and sched.waiting == 0
    assert a.in_flight == 2 and b.in_flight == 1
    for sid in ("s2", "s3", "s4"):
        acq.release(sid)
    await sched.aclose()


async def test_a_session_goes_to_the_warm_replica_rather_than_park_on_the_less_loaded() -> None:
    """The router picks B, the least loaded (``balance_slack=0``), where P's leader has no
    first token yet, while A, where P is warm, has room: the session goes to A."""
    replicas = [
        Replica(transport=IdleTransport(name), limits=Limits(max_in_flight=4), name=name)
        for name in ("A", "B")
    ]
    sched = Scheduler(replicas, clock=loop_clock, router=Router(sticky=False, balance_slack=0))
    a = sched.replicas[0]
    acq = Acquirer(sched)
    acq.submit(ticket("s0", prefix_key="P"))
    await settle()
    sched.warmed("P", a)
    acq.submit(ticket("q", prefix_key="Q"))
    acq.submit(ticket("r", prompt_tokens=1000))
    acq.submit(ticket("s1", prefix_key="P"))
    await settle()
    assert _placed(acq)[1:] == [("q", "B", True), ("r", "A", False), ("s1", "B", True)]
    acq.submit(ticket("s2", prefix_key="P"))
    await settle()
    assert _placed(acq)[4] == ("s2", "A", False) and sched.waiting == 0
    for sid in ("s0", "q", "r", "s1", "s2"):
        acq.release(sid)
    await sched.aclose()
