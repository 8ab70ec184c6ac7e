"""Slots reclaimed from a worker go to the worker that waits for them: the owing worker
neither dispatches into them (``LeasedScheduler._place``) nor gets them straight back
from the broker (``Broker._serve_pending``). Plain objects, no processes."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

from agentflow._workers._broker import Broker
from agentflow._workers._leased import LeasedScheduler
from agentflow.sched import Limits


class _Worker:
    alive = True

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, msg: tuple[Any, ...]) -> None:
        self.sent.append(msg)


def test_a_returned_slot_goes_to_the_worker_it_was_reclaimed_for() -> None:
    w0, w1 = _Worker(), _Worker()
    broker = Broker(Limits(max_in_flight=4), [w0, w1], [(4, 10), (0, 800)])  # type: ignore[list-item]
    broker.held = [4, 0]  # worker 0 took every slot while worker 1 had nothing queued
    broker.want_slots(0, 2)  # its queue wants more
    broker.want_slots(1, 2)  # worker 1's 800 sessions arrive: 2 reclaimed from worker 0
    assert ("reclaim", 2) in w0.sent
    broker.returned(0, 1)  # the first owed slot comes back
    assert w1.sent == [("slots", 1)] and ("slots", 1) not in w0.sent
    assert broker.held == [3, 1]


def test_an_owing_worker_does_not_dispatch_into_owed_slots() -> None:
    asked: list[int] = []
    client = SimpleNamespace(slotted=True, slots=4, owed=2, need_slots=asked.append)
    sched = SimpleNamespace(_client=client, in_flight=2, waiting=5, router=None, _granting=None)
    assert LeasedScheduler._place(sched, object()) is None  # type: ignore[arg-type]
    assert asked == [6]


def test_a_merged_replica_peak_is_at_most_the_fleets_bound() -> None:
    """Two workers' peaks at one replica add up past max_concurrency (they need not have
    coincided): the merged figure is capped at the fleet's bound."""
    from agentflow._fleet_types import ReplicaStats
    from agentflow._workers._results import merge_replicas

    def stats(peak: int) -> ReplicaStats:
        return ReplicaStats(name="r", served=5, failures=0, peak_in_flight=peak,
                            breaker_opened=0, breaker_held=0)  # fmt: skip

    (merged,) = merge_replicas([[stats(3)], [stats(3)]], ReplicaStats, 4)
    assert (merged.served, merged.peak_in_flight) == (10, 4)
    (uncapped,) = merge_replicas([[stats(1)], [stats(2)]], ReplicaStats, 4)
    assert uncapped.peak_in_flight == 3


def test_a_leased_take_cancelled_while_it_waits_keeps_the_debt() -> None:
    """As the in-process RateGate: the server's usage past a reservation is still owed
    by the next request after a take was cancelled waiting for more budget."""
    import asyncio

    from agentflow._workers._leased import LeasedRates

    class Client:
        def __init__(self) -> None:
            self.requests, self.tokens = 5, 0.0
            self.asked: list[float] = []

        async def more_rates(self, requests: int, tokens: float) -> None:
            self.asked.append(tokens)
            await asyncio.sleep(3600)  # the parent has none to give yet

    async def main() -> list[float]:
        client = Client()
        gate = LeasedRates(client)  # type: ignore[arg-type]
        gate.settle(reserved=10, used=60)  # 50 owed
        waiting = asyncio.ensure_future(gate.take(5))
        await asyncio.sleep(0)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        nxt = asyncio.ensure_future(gate.take(5))
        await asyncio.sleep(0)
        nxt.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await nxt
        return client.asked

    assert asyncio.run(main()) == [55.0, 55.0]  # the 50 still owed the second time


def test_a_worker_whose_message_does_not_unpickle_is_killed() -> None:
    """Unread from then on, it would run on, sending requests past the slots given back
    for it: the reader kills it, and the run hears it ended saying why (not lost: the
    same message would fail a new worker too). tests/workers/test_workers_messages.py
    runs it with real workers."""
    import asyncio

    from agentflow._workers._processes import _read_parent_side

    class Conn:
        closed = False

        def recv_bytes(self) -> bytes:
            return b"not a pickle"

    killed: list[bool] = []
    process = SimpleNamespace(kill=lambda: killed.append(True), join=lambda timeout: None)
    worker = SimpleNamespace(index=0, hung="", crash="", conn=Conn(), process=process)
    loop = asyncio.new_event_loop()
    lost: list[bool] = []
    try:
        _read_parent_side(worker, loop, lambda w, m: None, lambda w, how: lost.append(how))  # type: ignore[arg-type]
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    assert killed == [True] and lost == [False]
    assert worker.crash.startswith("sent a message the parent could not read: UnpicklingError(")


def test_a_debt_settled_while_a_leased_take_waits_is_kept_for_the_next() -> None:
    """Another request's usage arrives while a take waits for budget: that debt is the
    next take's, not wiped when this one is granted."""
    import asyncio

    from agentflow._workers._leased import LeasedRates

    class Client:
        def __init__(self) -> None:
            self.requests, self.tokens = 5, 0.0
            self.grant = asyncio.Event()

        async def more_rates(self, requests: int, tokens: float) -> None:
            await self.grant.wait()
            self.tokens += tokens

    async def main() -> float:
        client = Client()
        gate = LeasedRates(client)  # type: ignore[arg-type]
        waiting = asyncio.ensure_future(gate.take(5))
        await asyncio.sleep(0)
        gate.settle(reserved=10, used=40)  # 30 owed by a request that just ended
        client.grant.set()
        await waiting
        return gate._debt

    assert asyncio.run(main()) == 30.0


def test_a_slot_reclaimed_while_its_ticket_pays_the_fleet_rate_is_used_then_returned() -> None:
    """Fleet(workers=2, max_concurrency=1, rpm=...): worker 0 holds the one slot and its
    head ticket waits for rate budget; worker 1 asks for a slot, so the broker reclaims
    worker 0's. The paid ticket's slot is claimed (kept through the reclaim): it goes
    out on it, and the slot goes to worker 1 when its stream ends. Worker 0 used to
    refuse its own paid ticket (the slot was owed) and ask for more, which the broker
    never gives a worker that owes: both waited for ever."""
    import asyncio

    from agentflow._workers._leased import LeaseClient
    from agentflow.embedded import loop_clock, run_virtual
    from agentflow.sched import Replica
    from tests.sched.conftest import IdleTransport, ticket

    class Handle:  # the broker's handle on a worker, delivering to its LeaseClient
        alive = True
        client: LeaseClient

        def send(self, msg: tuple[Any, ...]) -> None:
            kind, n = msg
            getattr(self.client, {"slots": "granted_slots"}.get(kind, kind))(n)

    class Run:  # a worker's messages to the broker
        def __init__(self, i: int) -> None:
            self.i = i

        def send(self, msg: tuple[Any, ...]) -> None:
            kind, n, *_ = msg
            if kind == "want_slots":
                broker.want_slots(self.i, n)
            elif kind in ("return_slots", "return_spare"):
                broker.returned(self.i, n, owed=kind == "return_slots")

    handles = [Handle(), Handle()]
    broker = Broker(Limits(max_in_flight=1, rpm=60), handles, [(0, 1), (0, 1)])  # type: ignore[arg-type]

    async def main() -> tuple[bool, bool]:
        scheds = []
        for i, h in enumerate(handles):
            config = {"slots": True, "rates": True, "slot_batch": 1, "rpm": 60, "tpm": None,
                      "initial_slots": broker.held[i]}  # fmt: skip
            h.client = LeaseClient(Run(i), config)  # type: ignore[arg-type]
            replica = Replica(transport=IdleTransport("r"), name="r")
            scheds.append(LeasedScheduler([replica], clock=loop_clock, client=h.client))
        first = asyncio.ensure_future(scheds[0].acquire(ticket("a")))  # waits on the rate
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(scheds[1].acquire(ticket("b")))  # reclaims the slot
        await asyncio.sleep(0.1)
        for h in handles:
            h.client.granted_rates(5, 0.0)
        went = await asyncio.wait_for(asyncio.shield(first), 3600)  # virtual time
        scheds[0].release(went, used_tokens=None, ok=True)
        await asyncio.wait_for(asyncio.shield(second), 3600)
        for sched in scheds:
            await sched.aclose()
        return first.done(), second.done()

    assert run_virtual(main()) == (True, True)
    assert broker.held == [0, 1]


def test_a_slot_reclaimed_for_a_worker_is_not_handed_back_to_its_owner() -> None:
    """3 workers, 2 slots: worker 0's own ask was queued before worker 2's; the slot it
    returned went straight back to it, and worker 2 waited."""
    ws = [_Worker(), _Worker(), _Worker()]
    broker = Broker(Limits(max_in_flight=2, rpm=60), ws, [(0, 5)] * 3)  # type: ignore[arg-type]
    broker.held, broker.free = [2, 0, 0], 0
    broker.want_slots(0, 1)  # 2 in flight, 1 queued: it asks for a 3rd slot
    broker.want_slots(2, 1)  # worker 2 gets work: 1 slot reclaimed from worker 0 for it
    assert ws[0].sent == [("reclaim", 1)]
    broker.returned(0, 1)
    assert ws[2].sent == [("slots", 1)] and ws[0].sent == [("reclaim", 1)]
    assert broker.held == [1, 0, 1] and broker.pending == {0: 1}


def test_a_stale_ask_does_not_keep_an_idle_worker_from_giving_back_its_slots() -> None:
    """Worker 0's ask outlived its queue (a LeaseClient never asked again while one was
    out): idle and holding every slot, it was never asked for them, being 'waiting'."""
    ws = [_Worker(), _Worker(), _Worker()]
    broker = Broker(Limits(max_in_flight=2), ws, [(2, 0), (0, 0), (0, 1)])  # type: ignore[arg-type]
    broker.held, broker.free = [2, 0, 0], 0
    broker.pending = {2: 1, 0: 1}  # what the run above left (worker 0's queue drained since)
    for _ in range(4):  # its streams end; every worker tells every 0.25 s
        broker.live[0] = (0, 0)
        for j in range(3):
            broker.idle_check(j)
    assert ("spare", 2) in ws[0].sent
    broker.returned(0, 2, owed=False)  # its answer also withdraws its ask
    assert broker.pending == {} and ws[2].sent == [("slots", 1)]
    assert broker.held == [0, 0, 1] and broker.free == 1


def test_a_lease_client_withdraws_a_stale_ask_when_asked_for_spare_slots() -> None:
    """With nothing waiting, its answer to ``spare`` (even of no slot) withdraws its ask,
    and the next ticket short of a slot asks afresh (it never asked again while one
    was out)."""
    from agentflow._workers._leased import LeaseClient

    sent: list[tuple[Any, ...]] = []
    config = {"slots": True, "rates": False, "slot_batch": 1, "rpm": None, "tpm": None,
              "initial_slots": 1}  # fmt: skip
    client = LeaseClient(SimpleNamespace(send=sent.append), config)  # type: ignore[arg-type]
    client.scheduler = SimpleNamespace(waiting=0, claimed=1)  # type: ignore[assignment]
    client.need_slots(1)
    client.need_slots(1)  # one ask out at a time
    assert sent == [("want_slots", 1)]
    client.spare(1)  # its one slot is busy, nothing waits: no slot, but the ask goes
    assert sent[-1] == ("return_spare", 0) and client.slots == 1
    client.need_slots(1)
    assert sent[-1] == ("want_slots", 1) and len(sent) == 3


def test_the_rest_of_a_partly_granted_ask_waits_for_slots() -> None:
    """A worker asking for 2 slots when 1 was free got 1 and the broker forgot the rest,
    while the worker counted it as asked (it asks again only once granted): slots freed
    later stayed free while its tickets waited. The rest now waits like any ask."""
    w0, w1 = _Worker(), _Worker()
    broker = Broker(Limits(max_in_flight=8), [w0, w1], [(0, 0), (0, 0)])  # type: ignore[list-item]
    broker.held, broker.free = [7, 0], 1
    broker.want_slots(1, 2)
    assert w1.sent == [("slots", 1)] and broker.pending == {1: 1}
    broker.returned(0, 3, owed=False)  # worker 0 frees 3: the rest goes to worker 1
    assert w1.sent == [("slots", 1), ("slots", 1)] and broker.pending == {}
    assert broker.held == [4, 2]
