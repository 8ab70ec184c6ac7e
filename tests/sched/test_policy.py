"""Policies rank a ticket once, as a virtual arrival time; the scheduler serves the lowest.

Each policy is checked on hand-built tickets, then — where order over time matters
(fairness, aging) — through a real :class:`Scheduler` with one slot and a fake clock.
"""

from __future__ import annotations

import math

import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport
from agentflow.sched import (
    FCFS,
    PLAS,
    Deadline,
    FairShare,
    Limits,
    Policy,
    Priority,
    Replica,
    Scheduler,
    SchedulerState,
    Ticket,
    policy_by_name,
)
from agentflow.testing import Reply, ScriptedServer
from tests.sched.conftest import Acquirer, FakeClock, IdleTransport, settle, ticket

_NS = 1_000_000_000


def ranked(policy: Policy, tickets: list[Ticket], state: SchedulerState | None = None) -> list[str]:
    """Session ids in the order the scheduler would serve them (rank, then arrival)."""
    st = state or SchedulerState()
    keyed = []
    for seq, t in enumerate(tickets):
        st.now_ns = max(st.now_ns, t.ready_ns)
        keyed.append((policy(t, st), seq, t.session_id))
    return [sid for _, _, sid in sorted(keyed)]


def one_slot(policy: Policy, clock: FakeClock) -> Scheduler:
    """A real scheduler with one replica and one request in flight at a time."""
    return Scheduler(
        [Replica(transport=IdleTransport())],
        policy=policy,
        limits=Limits(max_in_flight=1),
        clock=clock,
        prefix_warmup=False,
    )


def test_fcfs_serves_in_arrival_order() -> None:
    tickets = [ticket(f"s{i}", ready_s=t) for i, t in enumerate([3.0, 1.0, 2.0, 1.0])]
    assert ranked(FCFS(), tickets) == ["s1", "s3", "s2", "s0"]  # ties: first queued first


def test_fair_share_interleaves_agents() -> None:
    """Agent A has 50 ready sessions, agent B one: B goes second, not 51st."""
    tickets = [ticket(f"a{i}", "A") for i in range(50)] + [ticket("b0", "B")]
    order = ranked(FairShare(), tickets)
    assert order.index("b0") == 1


async def test_fair_share_interleaves_through_the_scheduler() -> None:
    """Two agents with many queued turns alternate when served one at a time."""
    clock = FakeClock()
    sched = one_slot(FairShare(), clock)
    acq = Acquirer(sched)
    for i in range(20):
        acq.submit(ticket(f"a{i}", "A"))
    for i in range(3):
        acq.submit(ticket(f"b{i}", "B"))
    await settle()
    while len(acq.order) < 23:
        acq.release(acq.order[-1])
        await settle()
    agents = "".join(sid[0] for sid in acq.order)
    assert agents == "ababab" + "a" * 17
    await sched.aclose()


async def test_fair_share_does_not_punish_an_agent_that_ran_alone() -> None:
    """Agent A runs 100 turns alone (spare capacity), then B arrives: they take turns.

    Start-time fair queuing measures virtual time by the rank last served; ranking by
    the wall clock instead would put A's next turn 10 s (100 × quantum) in the future,
    behind ~90 of B's turns.
    """
    clock = FakeClock()
    sched = one_slot(FairShare(quantum_s=0.1), clock)
    acq = Acquirer(sched)
    for i in range(100):  # A alone: each turn is served at once
        clock.advance(0.01)
        acq.submit(ticket(f"a{i}", "A", ready_s=clock.now / _NS))
        await settle()
        acq.release(f"a{i}")
    acq.order.clear()
    hold = ticket("hold", "C")
    acq.submit(hold)
    await settle()
    for i in range(10):
        acq.submit(ticket(f"x{i}", "A", ready_s=clock.now / _NS))
        acq.submit(ticket(f"b{i}", "B", ready_s=clock.now / _NS))
    await settle()
    while len(acq.order) < 21:
        acq.release(acq.order[-1])
        await settle()
    served = "".join(sid[0] for sid in acq.order[1:])
    # B never gets more than one turn ahead of A.
    lead = max(served[:k].count("b") - served[:k].count("x") for k in range(len(served) + 1))
    assert lead <= 1, served
    await sched.aclose()


async def test_fair_share_takes_turns_under_a_backlog() -> None:
    """Agent A has 50 turns queued on one slot and each takes 1 s (10 quanta); B's one
    turn arrives at 5 s and goes next. Ranked at the wall clock ("now", 5 s), it would
    wait behind A's 45 queued turns, ranked 0.5–4.9 s: FCFS under a backlog."""
    clock = FakeClock()
    sched = one_slot(FairShare(quantum_s=0.1), clock)
    acq = Acquirer(sched)
    for i in range(50):
        acq.submit(ticket(f"a{i}", "A"))
    await settle()
    for _ in range(5):
        clock.advance(1.0)
        acq.release(acq.order[-1])
        await settle()
    assert len(acq.order) == 6
    acq.submit(ticket("b0", "B", ready_s=clock.now / _NS))
    await settle()
    clock.advance(1.0)
    acq.release(acq.order[-1])
    await settle()
    assert acq.order[-1] == "b0", acq.order
    while acq.grants:
        acq.release(acq.order[-1])
        await settle()
    assert len(acq.order) == 51
    await sched.aclose()


def test_fair_share_starts_afresh_in_each_run() -> None:
    """One FairShare ranks two runs (a scheduler state each). Run 1 served only agent A,
    30 turns; in run 2 A and B, queued at once, alternate — A's virtual time from run 1
    used to put all its turns behind B's."""
    fair = FairShare()
    ranked(fair, [ticket(f"w{i}", "A") for i in range(30)], SchedulerState())
    tickets = [ticket(f"b{i}", "B") for i in range(5)] + [ticket(f"a{i}", "A") for i in range(5)]
    order = ranked(fair, tickets, SchedulerState())
    assert "".join(sid[0] for sid in order) == "ba" * 5


async def test_a_fleets_fair_share_starts_afresh_in_each_run() -> None:
    """The same through a Fleet (one policy for all its runs) and a loopback server, one
    request at a time: run 2's agents take turns, as on a fresh Fleet."""
    a, b = Agent(name="A", model="m"), Agent(name="B", model="m")
    async with ScriptedServer([Reply.text("ok") for _ in range(40)]) as server:
        fleet = Fleet(
            HTTPTransport(server.base_url), policy="fair", max_concurrency=1, probe_slots=False
        )
        await fleet.run([a.session(f"warm{i}") for i in range(20)])  # run 1: A alone
        before = len(server.requests)
        second = [b.session(f"B{i}") for i in range(10)] + [a.session(f"A{i}") for i in range(10)]
        await fleet.run(second)  # run 2: both agents, queued at once
        order = "".join(r.headers["X-Session-ID"][0] for r in server.requests[before:])
    assert order == "BA" * 10


def test_plas_serves_less_attained_service_first() -> None:
    tickets = [
        ticket("long", ready_s=0.0, attained_s=2.0),
        ticket("short", ready_s=0.0, attained_s=0.0),
        ticket("late-short", ready_s=5.0, attained_s=0.1),
    ]
    # long: 0 + 10×2 = 20 s; short: 0; late-short: 5 + 1 = 6 s.
    assert ranked(PLAS(), tickets) == ["short", "late-short", "long"]


async def _starvation_run(policy: Policy, arrivals: int) -> tuple[list[str], int | None]:
    """A long session (10 s of service received) queues one turn while a short session
    arrives every second; served one at a time. Returns the order and when (which
    arrival) the long session's turn was served, or ``None`` if never."""
    clock = FakeClock()
    sched = one_slot(policy, clock)
    acq = Acquirer(sched)
    acq.submit(ticket("long"))
    await settle()
    clock.advance(10.0)  # the long session's first turn streams for 10 s
    acq.release("long")
    assert sched.state.attained_ns["long"] == 10 * _NS
    acq.submit(ticket("hold"))  # occupies the slot
    await settle()
    acq.submit(ticket("long", ready_s=clock.now / _NS, turn=1))
    await settle()
    served_at: int | None = None
    for n in range(arrivals):
        clock.advance(1.0)
        acq.submit(ticket(f"s{n}", ready_s=clock.now / _NS))
        await settle()
        acq.release(acq.order[-1])
        await settle()
        if served_at is None and acq.order[-1] == "long":
            served_at = n
    await sched.aclose()
    return acq.order, served_at


async def test_plas_ages_a_long_session_is_served_eventually() -> None:
    """With weight 10, the long session's turn ranks at 10 + 10 × 10 = 110 s: it is
    passed only by arrivals before that, then served — starvation-free."""
    order, served_at = await _starvation_run(PLAS(weight=10.0), arrivals=150)
    # Arrivals at t = 11 … 109 rank ahead of it; the one at t = 110 ties and loses to
    # the earlier arrival: the long turn is served at that arrival (the 100th).
    assert served_at == 99
    assert order.index("long", 1) < order.index("s101")


async def test_pure_plas_starves_it() -> None:
    """Without aging (weight = inf) the same stream of short sessions passes it forever."""
    _, served_at = await _starvation_run(PLAS(weight=math.inf), arrivals=150)
    assert served_at is None


def test_priority_boost_and_its_bound() -> None:
    """Each level buys ``boost_s`` of head start — and no more: low priority ages."""
    tickets = [
        ticket("low", ready_s=0.0, priority=0),
        ticket("high-20s-later", ready_s=20.0, priority=1),
        ticket("high-40s-later", ready_s=40.0, priority=1),
        ticket("top-50s-later", ready_s=50.0, priority=2),
    ]
    # high-20: 20 − 30 = −10; top-50: 50 − 2 × 30 = −10 (a tie: arrival order); low: 0;
    # high-40: 40 − 30 = 10 — a low-priority turn waits at most boost_s per level.
    assert ranked(Priority(boost_s=30.0), tickets) == [
        "high-20s-later",
        "top-50s-later",
        "low",
        "high-40s-later",
    ]
    assert ranked(Priority(boost_s=0.0), tickets) == [t.session_id for t in tickets]
    below = [ticket("neg", priority=-1), ticket("zero", ready_s=29.0)]
    assert ranked(Priority(boost_s=30.0), below) == ["zero", "neg"]


def test_deadline_is_earliest_deadline_first() -> None:
    policy = Deadline(default_slo_s=10.0, slo_s={"chat": 0.5, "batch": 60.0})
    tickets = [
        ticket("batch", "batch", ready_s=0.0),  # due at 60
        ticket("other", "other", ready_s=1.0),  # due at 11
        ticket("chat", "chat", ready_s=5.0),  # due at 5.5
        ticket("explicit", "batch", ready_s=6.0, deadline_s=3.0),  # its own deadline wins
    ]
    assert ranked(policy, tickets) == ["explicit", "chat", "other", "batch"]


def test_a_function_is_a_policy() -> None:
    """Users write their own: any ``(ticket, state) -> float``; here shortest prompt first."""

    def shortest_prompt(t: Ticket, state: SchedulerState, /) -> float:
        return float(t.prompt_tokens)

    tickets = [ticket("big", prompt_tokens=900), ticket("small", prompt_tokens=5)]
    assert ranked(shortest_prompt, tickets) == ["small", "big"]


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("fcfs", FCFS),
        ("fair", FairShare),
        ("plas", PLAS),
        ("priority", Priority),
        ("deadline", Deadline),
    ],
)
def test_policy_by_name(name: str, cls: type) -> None:
    assert isinstance(policy_by_name(name), cls)


def test_policy_errors_name_the_bad_value() -> None:
    with pytest.raises(ConfigError, match=r"'lifo'.*fair") as info:
        policy_by_name("lifo")
    assert "fcfs" in str(info.value) and "plas" in str(info.value)
    with pytest.raises(ConfigError, match=r"quantum_s.*-1"):
        FairShare(quantum_s=-1)
    with pytest.raises(ConfigError, match=r"weight.*0"):
        PLAS(weight=0)
    with pytest.raises(ConfigError, match=r"weight.*nan"):
        PLAS(weight=math.nan)
    with pytest.raises(ConfigError, match=r"boost_s.*-2"):
        Priority(boost_s=-2)
    with pytest.raises(ConfigError, match=r"'chat'.*-1"):
        Deadline(slo_s={"chat": -1})
