"""The dispatcher: the one task that grants the tickets the scheduler queued.

A :class:`~agentflow.sched.Scheduler` that cannot grant a ticket at once ranks it and
pushes it on its heap; :class:`Dispatcher`, the scheduler's base class, runs the single
task (started on the first queued ticket) that pops the best one whenever a slot frees,
a bucket refills, or a breaker lets a probe through, and grants it — the only waiter on
the fleet's rate buckets, whatever the number of sessions. A replica's buckets it never
waits on: one out of rate has no room (the router passes it over), and one with room is
charged at once. The head ticket's replica is chosen, and the grant counted in flight,
only after its wait on the fleet's buckets (a breaker that opened meanwhile is seen; the
ticket waiting is not a stream). When it cannot place the head, it sleeps
until the first moment something could change (:meth:`Dispatcher._wake_in_s`) or a
release wakes it; if it dies of a bug, every ticket waiting fails with the error instead
of hanging.

The scheduler places and starts grants (``_place``, ``_start``); this
module owns the queue they feed: the heap and the task. The tickets parked behind a
warming prefix, and where each prefix is warm, are its base class's
(:mod:`._warmups`).
"""

from __future__ import annotations

import asyncio
import heapq

from agentflow._logging import get_logger
from agentflow.sched._limits import Limits, RateGate
from agentflow.sched._replica import ReplicaState
from agentflow.sched._ticket import Grant, Ticket, Waiter
from agentflow.sched._warmups import Entry, PrefixWarmups

__all__ = ["Dispatcher"]

_log = get_logger("agentflow.sched")


class Dispatcher(PrefixWarmups):
    """The scheduler's queue and the one task that grants from it (a base class)."""

    limits: Limits
    _rates: RateGate | None
    in_flight: int

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[Entry] = []
        # The waiters of parked tickets whose charge on the fleet's buckets is paid: it
        # was, and they parked after it (a leader started there meanwhile), so their
        # grant does not take it again.
        self._prepaid: set[Waiter] = set()
        self._pump: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._busy = False
        # The ticket the dispatcher is granting (popped, then waited on a bucket for):
        # in no queue, so aclose and a crashed dispatcher must settle its waiter from here.
        self._granting: Waiter | None = None

    def _place(self, ticket: Ticket) -> ReplicaState | None:
        """The replica ``ticket`` may go to now, or ``None`` (the scheduler's)."""
        raise NotImplementedError

    def _start(self, ticket: Ticket, replica: ReplicaState, rank: float) -> Grant:
        """Count ``ticket`` as dispatched to ``replica`` (the scheduler's)."""
        raise NotImplementedError

    def _kick(self) -> None:
        """Something changed (a ticket queued, a slot freed): start or wake the task."""
        if self._pump is None:
            if not self._heap:
                return
            self._pump = asyncio.get_running_loop().create_task(
                self._run_pump(), name="agentflow-dispatcher"
            )
            self._pump.add_done_callback(self._pump_ended)
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, timeout_s: float | None) -> None:
        """Wait for a :meth:`_kick`, or ``timeout_s`` (``None``: no timer)."""
        loop = asyncio.get_running_loop()
        self._wakeup = waiter = loop.create_future()
        handle = loop.call_later(timeout_s, _wake, waiter) if timeout_s is not None else None
        try:
            await waiter
        finally:
            self._wakeup = None
            if handle is not None:
                handle.cancel()

    async def _run_pump(self) -> None:
        """Grant the head of the heap whenever it can be placed; sleep otherwise."""
        heap = self._heap
        while True:
            if not heap:
                await self._sleep(None)
                continue
            rank, _, ticket, fut = entry = heap[0]
            if fut.done():  # its session was cancelled while queued
                heapq.heappop(heap)
                self._prepaid.discard(fut)
                continue
            replica: ReplicaState | None = self._place(ticket)
            if replica is None:
                await self._sleep(self._wake_in_s(ticket))
                continue
            go = self._go(ticket, replica)
            if go is None:  # its prefix is warming there, and no replica it is warm on has room
                heapq.heappop(heap)
                self._park(entry, replica)
                continue
            replica = go
            # Once popped it is in no queue: from here on, aclose and a crashed
            # dispatcher (_pump_ended) settle its waiter through _granting.
            self._granting = fut
            heapq.heappop(heap)
            if self._rates is not None:  # the fleet's buckets: waited on, then placed again
                if fut in self._prepaid:
                    self._prepaid.discard(fut)
                else:
                    replica = await self._paid(entry)
            if replica is None:  # its session was cancelled while it waited, or it parked
                self._granting = None
                continue
            # The replica's buckets had room (the router checked): charged at once,
            # overdrawn by a charge bigger than the bucket, never waited on here.
            if replica.rates is not None:
                replica.rates.charge_now(ticket.tokens)
            grant = self._start(ticket, replica, rank)
            self._granting = None
            fut.set_result(grant)

    async def _paid(self, entry: Entry) -> ReplicaState | None:
        """Wait for the head ticket's charge on the fleet's buckets, then place it again
        (``None``: its waiter was settled meanwhile, or it parked: a leader of its prefix
        started meanwhile where it is placed — it waits for that leader's first token
        like any other, its charge paid, not taken again when it goes).

        The replica is chosen, and the grant counted in flight, only once the charge is
        paid: a breaker that opened or a hold that began during the wait is seen, a probe
        is a probe when it goes, and ``in_flight`` counts open streams only. Nothing else
        is granted meanwhile (``_busy``: :meth:`Scheduler._try_now` queues instead), so
        the cap and the replicas' room can only have grown (a worker's leased slots
        reclaimed meanwhile keep the claimed one: ``LeasedScheduler._place``) — unless
        every replica with room stopped allowing it, when the paid ticket waits at the
        head, its charge not taken again, for the first moment one could
        (:meth:`_wake_in_s`).
        """
        assert self._rates is not None
        ticket, fut = entry[2], entry[3]
        self._busy = True
        try:
            await self._rates.take(ticket.tokens)  # aclose cancels it; _pump_ended fails it
            while not fut.done():
                replica = self._place(ticket)
                if replica is not None:
                    go = self._go(ticket, replica)
                    if go is None:
                        self._prepaid.add(fut)
                        self._park(entry, replica)
                    return go
                await self._sleep(self._wake_in_s(ticket))
            return None
        finally:
            self._busy = False

    def _pump_ended(self, task: asyncio.Task[None]) -> None:
        """If the dispatcher dies of a bug, fail every waiter with it instead of hanging."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        _log.error("dispatcher.crashed", error=repr(exc))
        waiting = [e[3] for e in self._heap] + [e[3] for p in self._parked.values() for e in p]
        if self._granting is not None:
            waiting.append(self._granting)
            self._granting = None
        self._heap.clear()
        self._parked.clear()
        self._prepaid.clear()
        self._cancel_warm_timers()
        # Warm-ups under way lose their leaders' records with it: a leader ending now
        # could not end its warm-up, and the prefix's next tickets would park for ever.
        self._warm.drop_warming()
        self._pump = None
        for fut in waiting:
            if not fut.done():
                fut.set_exception(RuntimeError(f"agentflow's dispatcher failed: {exc!r}"))

    def _wake_in_s(self, ticket: Ticket) -> float | None:
        """When ``ticket`` cannot be placed, how long to sleep: until the first open
        breaker lets a probe through (its replica may have room while the closed ones are
        full), or until the first replica with room whose rate bucket is empty has
        refilled enough for ``ticket``, or until a replica's ``Retry-After`` hold ends
        (the router passes over a held one while another is healthy); else until a
        release wakes the dispatcher.

        A half-open breaker whose probe is out lets nothing through until that probe
        ends, and its release wakes the dispatcher: it sets no timer. Neither does a
        replica that could take the ticket now (a wait of 0): the router passed it over
        for its hold, whose end has its own timer.
        """
        waits = [r.breaker.opens_in_ns() * 1e-9 for r in self.replicas if r.breaker.state == "open"]
        waits += [held * 1e-9 for r in self.replicas if (held := r.held_ns())]
        cap = self.limits.max_in_flight
        if cap is None or self.in_flight < cap:
            for r in self.replicas:
                if r.rates is not None and r.breaker.allows():
                    wait = r.wait_s(ticket)
                    if wait:  # (None: full; 0: could go now)
                        waits.append(wait)
        return min(waits) + 1e-6 if waits else None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
