"""Edges of the prefix warm-up found in review of its own fixes: a dispatcher that
crashed, a stale leader's first token on a replica that shares only at its end, a
freed slot's re-offer meeting a cancelled ticket, and overflow on such replicas."""

from __future__ import annotations

import asyncio

from agentflow import Limits, Replica
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router, Scheduler
from agentflow.sched._ticket import Ticket
from tests.sched.conftest import (
    Acquirer,
    IdleTransport,
    idle_replicas,
    settle,
    ticket,
    warm_on_a_parked_on_b,
)


def test_after_a_dispatcher_crash_a_prefix_is_not_left_warming_for_ever() -> None:
    """The dispatcher dies of a (router) bug while a leader is in flight: it forgets its
    leaders; that leader then ending unanswered could not end its warm-up, and every
    later ticket of its prefix parked for ever."""

    class Boom(Router):
        def choose(self, t: Ticket, replicas: list[object]) -> object:  # type: ignore[override]
            if t.session_id == "boom":
                raise ValueError("router bug")
            return super().choose(t, replicas)  # type: ignore[arg-type]

    async def main() -> bool:
        replica = Replica(transport=IdleTransport("A"), limits=Limits(max_in_flight=8), name="A")
        sched = Scheduler(
            [replica], clock=loop_clock, router=Boom(sticky=False), limits=Limits(max_in_flight=2)
        )
        acq = Acquirer(sched)
        acq.submit(ticket("lead", prefix_key="P"))
        await settle()
        acq.submit(ticket("x"))
        await settle()
        crashed = acq.submit(ticket("boom"))
        await settle()
        acq.release("x")
        await settle()
        assert crashed.done() and isinstance(crashed.exception(), Exception)
        acq.release("lead", ok=None)  # cancelled before its first token
        await settle()
        later = acq.submit(ticket("g", prefix_key="P"))
        await asyncio.sleep(600)
        await settle()
        granted = later.done()
        for k in list(acq.grants):
            acq.release(k)
        await sched.aclose()
        return granted

    assert run_virtual(main())


def test_a_stale_leaders_first_token_keeps_its_successors_timeout() -> None:
    """On a replica that shares a prefix only at its end, a timed-out leader's late first
    token cancelled its successor's timer: the tickets parked behind the successor then
    waited for its whole stream, past ``warmup_timeout_s``."""

    async def main() -> bool:
        replica = Replica(
            transport=IdleTransport("A"), limits=Limits(max_in_flight=8), name="A",
            prefix_shared_at="end",
        )  # fmt: skip
        sched = Scheduler([replica], clock=loop_clock, router=Router(sticky=False),
                          warmup_timeout_s=5.0)  # fmt: skip
        a, acq = sched.replicas[0], Acquirer(sched)
        acq.submit(ticket("L1", prefix_key="P"))
        await settle()
        await asyncio.sleep(6)  # L1 timed out
        await settle()
        acq.submit(ticket("L2", prefix_key="P"))
        await settle()
        acq.submit(ticket("f", prefix_key="P"))
        await settle()
        assert acq.grants["L2"].leader and "f" not in acq.grants
        sched.leader_token("P", a, acq.grants["L1"])  # L1's late first token, as its sink says
        acq.release("L1", ok=False)
        await asyncio.sleep(10)  # past L2's timeout
        await settle()
        went = "f" in acq.grants
        for k in list(acq.grants):
            acq.release(k)
        await settle()
        await sched.aclose()
        return went

    assert run_virtual(main())


def test_a_freed_slot_is_not_re_offered_to_a_cancelled_parked_ticket() -> None:
    """The one re-offer of a freed slot went to a ticket cancelled while parked (the pump
    only dropped it); another prefix's parked ticket stayed parked with the slot free."""

    async def main() -> str | None:
        router = Router(sticky=False)
        sched = Scheduler(idle_replicas({"A": 2, "B": 8}), clock=loop_clock, router=router)
        acq = Acquirer(sched)
        await warm_on_a_parked_on_b(sched, router, acq)
        assert "P2" not in acq.grants and "Q2" not in acq.grants  # parked behind B's leaders
        acq.tasks["P2"].cancel()
        await settle()
        acq.release("P0")  # a slot frees on A, where Q is warm
        await settle()
        where = acq.grants["Q2"].replica.name if "Q2" in acq.grants else None
        for k in list(acq.grants):
            acq.release(k)
        await settle()
        await sched.aclose()
        return where

    assert run_virtual(main()) == "A"


def test_overflow_leads_on_an_idle_replica_rather_than_wait_for_an_end_shared_leader() -> None:
    """Replicas that share a prefix only at a request's end (llama.cpp): a ticket placed on
    an idle cold replica does not park behind the prefix's leader on another — that wait
    is the leader's whole generation, for a prefix its own replica would not get."""

    async def main() -> tuple[str, bool]:
        replicas = idle_replicas({"A": 1, "B": 8, "C": 8}, prefix_shared_at="end")
        sched = Scheduler(replicas, clock=loop_clock, router=Router(sticky=False))
        acq = Acquirer(sched)
        acq.submit(ticket("lead", prefix_key="P"))
        await settle()
        sched.warmed("P", sched.replicas[0])  # A warm, and full
        acq.submit(ticket("f0", prefix_key="P"))  # leads on B
        await settle()
        sched.leader_token("P", sched.replicas[1], acq.grants["f0"])
        acq.submit(ticket("f1", prefix_key="P"))  # placed on idle C
        await settle()
        grant = acq.grants.get("f1")
        got = (grant.replica.name, grant.leader) if grant is not None else ("parked", False)
        for k in list(acq.grants):
            acq.release(k)
        await settle()
        await sched.aclose()
        return got

    assert run_virtual(main()) == ("C", True)
