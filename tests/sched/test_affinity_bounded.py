"""What the router and the dispatcher keep about prefixes stays bounded: a fleet with one
prefix per session (each agent its own instructions), run again and again on one router,
or one long run of many such sessions, does not keep an entry per session ever started.

Counted, never timed: the entries left after runs, and which run's replicas they name.
"""

from __future__ import annotations

import asyncio

from agentflow import Agent, Fleet, FleetResult, Replica, Session, tool
from agentflow.sched import Router, Scheduler
from agentflow.sched._replica import ReplicaState
from agentflow.sched._ticket import Ticket
from agentflow.sched._warmth import WARM, WARMING, Warmth
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest


def _ok(request: ChatRequest) -> Reply:
    return Reply.text("ok", prompt_tokens=50)


def _fleet(
    router: Router, caught: list[Scheduler], concurrency: int = 8, warm_kept: int | None = None
) -> Fleet:
    """Two in-process replicas sharing ``router``; each run's scheduler lands in ``caught``
    (remembering ``warm_kept`` warm prefixes, when given)."""
    replicas = [Replica(transport=MockTransport(_ok, endpoint=f"mock://r{i}")) for i in range(2)]
    fleet = Fleet(replicas, router=router, max_concurrency=concurrency)
    new_scheduler = fleet._new_scheduler

    def recording() -> Scheduler:
        caught.append(scheduler := new_scheduler())
        if warm_kept is not None:
            scheduler._warm.kept = warm_kept
        return scheduler

    fleet._new_scheduler = recording  # type: ignore[method-assign]
    return fleet


def _sessions(run: int, n: int) -> list[Session]:
    """``n`` sessions, each of an agent with its own instructions (its own prefix key)."""
    return [
        Agent(name="a", model="m", instructions=f"You work on task {run}-{j}.").session("go")
        for j in range(n)
    ]


async def test_an_earlier_runs_affinity_is_drawn_anew() -> None:
    router = Router()
    caught: list[Scheduler] = []
    fleet = _fleet(router, caught)
    sessions = _sessions(0, 20)
    assert not (await fleet.run(sessions)).failed
    # The same prefixes again: each affinity that pointed at the first run's replica
    # states now points at the second run's (the first run's are not kept alive).
    again = [Agent(name="a", model="m", instructions=s.agent.instructions).session("go")
             for s in sessions]  # fmt: skip
    assert not (await fleet.run(again)).failed
    assert len(router._prefix) == 20
    now = {id(r) for r in caught[-1].replicas}
    assert {id(r) for r in router._prefix.values()} <= now


async def test_two_fleets_sharing_a_router_at_once_keep_their_affinities() -> None:
    router = Router()
    caught: list[Scheduler] = []
    one, two = _fleet(router, caught), _fleet(router, caught)
    a, b = await asyncio.gather(one.run(_sessions(1, 20)), one_more(two))
    assert not a.failed and not b.failed
    # Each run's prefixes are its own: neither dropped the other's affinities.
    assert len(router._prefix) == 40


async def one_more(fleet: Fleet) -> FleetResult:
    return await fleet.run(_sessions(2, 20))


async def test_a_router_keeps_the_most_recently_sent_prefixes() -> None:
    router = Router()
    router._prefixes_kept = 5
    caught: list[Scheduler] = []
    sessions = _sessions(0, 30)
    result = await _fleet(router, caught).run(sessions)
    assert not result.failed
    assert len(router._prefix) == 5
    assert set(router._prefix) <= {s.agent.prefix_key for s in sessions}


async def test_a_sessions_turns_keep_its_prefix_recent() -> None:
    """Each placement makes its prefix the most recent: the least recently sent goes."""
    router = Router()
    router._prefixes_kept = 2
    caught: list[Scheduler] = []
    agents = [Agent(name=n, model="m", instructions=f"You are {n}.") for n in "xyz"]
    # One at a time: x sent again after y, so y is the least recent when z comes.
    sessions = [agents["xyz".index(name)].session("go") for name in "xyxz"]
    result = await _fleet(router, caught, concurrency=1).run(sessions)
    assert not result.failed
    assert list(router._prefix) == [agents[0].prefix_key, agents[2].prefix_key]


async def test_a_run_of_many_prefixes_keeps_the_most_recently_used_warm() -> None:
    caught: list[Scheduler] = []
    result = await _fleet(Router(), caught, warm_kept=5).run(_sessions(0, 30))
    assert not result.failed
    warm = caught[0]._warm
    # Not one per prefix the run sent (30): the bound, and at most the prefixes of the
    # sessions live when the last ones warmed (the fleet runs 8 at once).
    assert 5 <= len(warm) <= 5 + 8
    assert set(warm.values()) == {WARM}
    warm["new", "mock://r0"] = WARM  # no session is live now: back to the bound
    assert len(warm) == 5


def test_warm_entries_go_least_recently_used_first() -> None:
    warm = Warmth(kept=2)
    warm["P", "A"] = WARMING
    warm["P", "A"] = WARM
    warm["Q", "A"] = WARM
    assert warm.used(("P", "A"))  # a ticket started there: P is the most recent
    warm["R", "B"] = WARMING
    assert len(warm) == 3  # a warm-up under way drops nothing
    warm["R", "B"] = WARM  # one too many: the least recently used warm one goes
    assert list(warm.items()) == [(("P", "A"), WARM), (("R", "B"), WARM)]
    assert not warm.used(("Q", "A"))


def test_warm_ups_under_way_are_never_dropped() -> None:
    warm = Warmth(kept=1)
    warm["X", "A"] = WARMING
    warm["Y", "A"] = WARMING
    warm["Z", "A"] = WARM  # over the bound, but nothing to drop: both are warming
    assert list(warm.items()) == [(("X", "A"), WARMING), (("Y", "A"), WARMING), (("Z", "A"), WARM)]
    warm["X", "A"] = WARM  # Z goes, the new one stays
    assert list(warm.items()) == [(("Y", "A"), WARMING), (("X", "A"), WARM)]
    warm.drop_warming()  # (a crashed dispatcher: its leaders' records are gone)
    assert list(warm.items()) == [(("X", "A"), WARM)]


def test_a_live_sessions_prefix_is_never_dropped() -> None:
    warm = Warmth(kept=1)
    warm.live_session("s1", "P")
    for key in ("P", "Q", "R"):
        warm[key, "A"] = WARMING
        warm[key, "A"] = WARM
    assert list(warm) == [("P", "A"), ("R", "A")]  # Q went, P is sent by a live session
    warm.forget_session("s1")  # its session ended
    warm["S", "A"] = WARM
    assert list(warm) == [("S", "A")]


async def test_more_live_sessions_than_the_bound_lead_once_each() -> None:
    """Sessions of their own prefixes, more of them live at once than the bound: each
    used to see its warm entry dropped before its next turn, and led a warm-up on every
    turn (past the warm-up timeout, a warning and an avoided replica each time)."""

    @tool
    def step(x: int) -> int:
        """A step."""
        return x

    def handler(request: ChatRequest) -> Reply:
        if sum(m.get("role") == "tool" for m in request.messages) < 2:
            return Reply.tool_call("step", {"x": 1}, prompt_tokens=50)
        return Reply.text("done", prompt_tokens=50)

    replicas = [
        Replica(transport=MockTransport(handler, endpoint=f"mock://r{i}")) for i in range(2)
    ]
    fleet = Fleet(replicas, router=Router(), max_concurrency=20)
    caught: list[Scheduler] = []
    leads: list[Ticket] = []
    new_scheduler = fleet._new_scheduler

    def recording() -> Scheduler:
        caught.append(scheduler := new_scheduler())
        scheduler._warm.kept = 4
        leads_here = scheduler._leads

        def counted(ticket: Ticket, replica: ReplicaState) -> bool:
            led = leads_here(ticket, replica)
            if led:
                leads.append(ticket)
            return led

        scheduler._leads = counted  # type: ignore[method-assign]
        return scheduler

    fleet._new_scheduler = recording  # type: ignore[method-assign]
    sessions = [
        Agent(name="a", model="m", instructions=f"task {j}", tools=[step]).session("go")
        for j in range(20)
    ]
    result = await fleet.run(sessions)
    assert not result.failed
    assert sum(len(s.turns) for s in result.sessions) == 60
    assert len(leads) == 20  # one per session's first turn, not one per turn
    assert caught[0]._warm.live == {}  # every session ended: none is live


def test_the_bound_counts_the_live_prefixes_entries_on_every_replica() -> None:
    """A live prefix warm on two replicas is two entries: the bound applies to the
    others, and the ended prefixes' entries within it are kept (counting live prefixes,
    not their entries, dropped them all, and scanned the record at every warm-up)."""
    warm = Warmth(kept=2)
    for key in ("E1", "E2"):  # ended prefixes, within the bound
        warm[key, "A"] = WARM
    for j in range(5):
        warm.live_session(f"s{j}", f"L{j}")
        for replica in ("A", "B"):
            warm[f"L{j}", replica] = WARMING
            warm[f"L{j}", replica] = WARM
    assert ("E1", "A") in warm and ("E2", "A") in warm
    assert len(warm) == 12
    for j in range(5):
        warm.forget_session(f"s{j}")
    warm["N", "A"] = WARM  # the bound again: the 2 most recently used of the rest
    assert list(warm) == [("L4", "B"), ("N", "A")]
