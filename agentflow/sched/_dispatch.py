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
module owns the queue they feed: the heap, the tickets parked behind a warming prefix,
and the task.

**Prefix warm-up is per replica.** A prefix is warm on the replica its leader's
prefill ran on, not on the others (each server has its own KV cache). A ticket is
placed first, then parked if its prefix is warming *on that replica*; one placed on a
replica where its prefix is cold becomes that replica's leader. So when the replica
the prefix warmed on is full, the overflow does not all go cold to the next one at
once: one leads there, the rest park again until it has its first token — a ticket
placed on a replica where its prefix is cold parks behind a leader warming it on
another, so a prefix has one warm-up under way at a time beyond where it is warm. A ticket
that would park goes instead to a replica where its prefix is warm, if one has room
(:meth:`Dispatcher._go`), and a slot freeing on such a replica re-offers the first
ticket parked behind a leader elsewhere (:meth:`Dispatcher._reoffer`). Parked tickets
are kept by prefix *and* replica: a leader's first token releases only its own. Where a
prefix is warm is kept for the most recently used ones only (:mod:`._warmth`).
"""

from __future__ import annotations

import asyncio
import heapq

from agentflow._logging import get_logger
from agentflow.sched._limits import Limits, RateGate
from agentflow.sched._replica import ReplicaState
from agentflow.sched._router import Router
from agentflow.sched._ticket import Grant, Ticket, Waiter
from agentflow.sched._warmth import WARM, WARMING, WarmKey, Warmth
from agentflow.typing import Clock

__all__ = ["AVOID_S", "WARM", "WARMING", "WARMUP_TIMEOUT_S", "Dispatcher", "Entry"]

_log = get_logger("agentflow.sched")

#: How long the tickets parked behind a prefix's leader wait for its first token before
#: they go anyway (seconds; :class:`~agentflow.sched.Scheduler`'s ``warmup_timeout_s``).
WARMUP_TIMEOUT_S = 20.0
#: How long, after the stream of a prefix's leader that failed on a replica (or had no
#: first token within the warm-up timeout) ended, that prefix's tickets still go elsewhere
#: while another replica has room (seconds; :meth:`ReplicaState.avoids`).
AVOID_S = 60.0
#: A timed-out leader's replica is avoided at least until its stream ends.
_UNTIL_IT_ENDS = 1 << 62
#: A queued ticket: its rank, its arrival order (ties), the ticket and who waits for it.
Entry = tuple[float, int, Ticket, Waiter]


class Dispatcher:
    """The scheduler's queue and the one task that grants from it (a base class)."""

    replicas: list[ReplicaState]
    limits: Limits
    prefix_warmup: bool
    warmup_timeout_s: float | None
    router: Router
    _clock: Clock
    _rates: RateGate | None
    in_flight: int

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._warm = Warmth()  # (the most recently used, and the live sessions')
        # The leaders' timers: when one fires, its prefix stops waiting on that replica.
        self._warm_timers: dict[WarmKey, asyncio.TimerHandle] = {}
        # The grant leading each warm-up in progress: a stale leader (timed out, then a
        # new one started) ending must not end its successor's warm-up.
        self._leaders: dict[WarmKey, Grant] = {}
        # The tickets parked behind each warming prefix's leader, by prefix and replica.
        self._parked: dict[WarmKey, list[Entry]] = {}
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

    def _behind(self, ticket: Ticket, replica: ReplicaState) -> ReplicaState | None:
        """The replica whose prefix leader ``ticket``, placed on ``replica``, waits for:
        ``replica`` if its prefix is warming there; if it is cold there (``ticket`` would
        lead there), another replica it is warming on — so a prefix has one warm-up at a
        time beyond the replicas it is warm on, not one per cold replica the overflow is
        placed on; else ``None`` (it goes)."""
        key = ticket.prefix_key
        if not self.prefix_warmup or key is None:
            return None
        state = self._warm.get((key, replica.name))
        if state is not None:
            return replica if state == WARMING else None
        if len(self.replicas) > 1:  # (only a leading ticket pays for the scan)
            for r in self.replicas:
                # Not behind one that shares only at its end (llama.cpp): that wait is a
                # whole generation, for a prefix this replica would not get anyway.
                if (
                    self._warm.get((key, r.name)) == WARMING
                    and not r.shares_at_end
                    and r.name not in ticket.exclude
                ):
                    return r
        return None

    def _go(self, ticket: Ticket, replica: ReplicaState) -> ReplicaState | None:
        """Where ``ticket``, placed on ``replica``, goes now: there, or, when it would park
        behind its prefix's leader (:meth:`_behind`), a replica where its prefix is warm
        and that has room (the router's choice may be a cold one: the warm one was full,
        or past ``balance_slack``, when the prefix's affinity moved), else ``None`` (it
        parks)."""
        if self._behind(ticket, replica) is None:
            return replica
        key = ticket.prefix_key
        for r in self.replicas:
            if (
                self._warm.get((key or "", r.name)) == WARM
                and r.name not in ticket.exclude
                and r.breaker.allows()
                and not r.held_ns()
                and r.has_room(ticket)
            ):
                return r
        return None

    def _park(self, entry: Entry, replica: ReplicaState) -> None:
        """Park ``entry``, placed on ``replica``, behind its prefix's leader there, or,
        its prefix cold there, behind the one warming it elsewhere."""
        behind = self._behind(entry[2], replica) or replica
        self._parked.setdefault((entry[2].prefix_key or "", behind.name), []).append(entry)

    def _reoffer(self, replica: ReplicaState) -> None:
        """A slot freed on ``replica``: of the tickets parked behind a leader elsewhere
        whose prefix is warm on ``replica``, the first is placed again (it may go there
        now: :meth:`_go`); one a slot, so a busy replica does not re-place them all at
        each release."""
        name, warm = replica.name, self._warm
        best: Entry | None = None
        best_key: WarmKey | None = None
        for warm_key, parked in self._parked.items():
            if warm.get((warm_key[0], name)) == WARM:
                # (rank, seq): seq is unique, tickets never compared; one whose acquire
                # was cancelled while parked is no offer (the pump would only drop it)
                live = [e for e in parked if not e[3].done()]
                first = min(live) if live else None
                if first is not None and (best is None or first < best):
                    best, best_key = first, warm_key
        if best is None or best_key is None:
            return
        parked = self._parked[best_key]
        parked.remove(best)
        if not parked:
            del self._parked[best_key]
        self._unpark([best])

    def _leads(self, ticket: Ticket, replica: ReplicaState) -> bool:
        """``ticket`` starts on ``replica``: whether it is its prefix's leader there (the
        prefix is cold on that replica: the tickets placed there next park)."""
        key = ticket.prefix_key
        if not self.prefix_warmup or key is None:
            return False
        self._warm.live_session(ticket.session_id, key)
        if self._warm.used((key, replica.name)):
            return False
        self._warm[key, replica.name] = WARMING
        if self.warmup_timeout_s is not None:
            self._warm_timers[key, replica.name] = asyncio.get_running_loop().call_later(
                self.warmup_timeout_s, self._warm_timed_out, key, replica
            )
        return True

    def leader_token(
        self, prefix_key: str, replica: ReplicaState, grant: Grant | None = None
    ) -> None:
        """The prefix's leader on ``replica`` (``grant``, when known) has its first
        token: the prefix is warm there — or, on a replica that shares a prefix only once
        its request ended (``Replica.prefix_shared_at="end"``: llama.cpp), it is alive,
        and its followers wait for its end, with no more timeout. A stale leader's (one
        that timed out, a new one leading since) leaves its successor's timer alone."""
        if replica.shares_at_end:
            leader = self._leaders.get((prefix_key, replica.name))
            if grant is not None and leader is not None and leader is not grant:
                return
            timer = self._warm_timers.pop((prefix_key, replica.name), None)
            if timer is not None:
                timer.cancel()
            return
        self.warmed(prefix_key, replica)

    def warmed(self, prefix_key: str, replica: ReplicaState) -> None:
        """The prefix's leader on ``replica`` has its first token (its prefill is done,
        the prefix is in that server's cache), or it ended: release the tickets parked
        behind it. They are placed again: those placed where the prefix is warming still
        park, and one placed where it is cold leads there."""
        warm_key = (prefix_key, replica.name)
        self._leaders.pop(warm_key, None)
        if self._warm.get(warm_key) == WARM:
            return
        self._warm[warm_key] = WARM
        replica.avoid_until.pop(prefix_key, None)
        timer = self._warm_timers.pop(warm_key, None)
        if timer is not None:
            timer.cancel()
        self._unpark(self._parked.pop(warm_key, None))

    def _warm_timed_out(self, prefix_key: str, replica: ReplicaState) -> None:
        """The leader on ``replica`` had no first token within ``warmup_timeout_s``:
        its followers go without it — elsewhere while another replica has room (a replica
        that went silent would otherwise hold them for its idle timeout, then draw them
        back): the prefix is cold there again, not warm, its affinity stops pointing
        there, and its tickets avoid it until the leader's stream ends, and
        :data:`AVOID_S` after, unless the leader warms it meanwhile."""
        self._warm_timers.pop((prefix_key, replica.name), None)
        if self._warm.get((prefix_key, replica.name)) != WARMING:
            return
        _log.warning(
            "warmup.timeout",
            replica=replica.name,
            prefix_key=prefix_key,
            timeout_s=self.warmup_timeout_s,
        )
        self.router.unpin(prefix_key, replica)
        self._avoid(prefix_key, replica, _UNTIL_IT_ENDS)
        self._cool(prefix_key, replica)

    def _leader_ended(self, grant: Grant, prefix_key: str, ok: bool | None) -> None:
        """The stream of ``grant``, its prefix's leader on its replica, ended: ``ok`` as
        :meth:`Scheduler.release`'s. Answered, the prefix is warm there. Ended before its
        first token unanswered (failed, cancelled), the prefix is cold there again: the
        tickets parked behind it are placed again, and at most one leads there anew. A
        failure that blames the replica also stops the prefix's affinity pointing there,
        and its tickets avoid it for :data:`AVOID_S`; so do a timed-out leader's when it
        ends unanswered. A timed-out leader no longer leads the warm-up there: if a new
        leader started there meanwhile, its ending unanswered leaves that one's warm-up
        (and the tickets parked behind it) alone."""
        replica = grant.replica
        if ok:
            self.warmed(prefix_key, replica)
            return
        warm_key = (prefix_key, replica.name)
        warming = self._leaders.get(warm_key) is grant and self._warm.get(warm_key) == WARMING
        if ok is False:
            self.router.unpin(prefix_key, replica)
        if (ok is False and warming) or replica.avoid_until.get(prefix_key) == _UNTIL_IT_ENDS:
            self._avoid(prefix_key, replica, self._clock() + int(AVOID_S * 1e9))
        if warming:  # (cancelled too: its prefill may not have run)
            self._cool(prefix_key, replica)

    def _avoid(self, prefix_key: str, replica: ReplicaState, until_ns: int) -> None:
        replica.avoid_until[prefix_key] = until_ns
        self.router.avoided.add(prefix_key)

    def _cool(self, prefix_key: str, replica: ReplicaState) -> None:
        """The prefix's warm-up on ``replica`` ended without its first token: the prefix
        is cold there again, and the tickets parked behind it are placed again."""
        warm_key = (prefix_key, replica.name)
        timer = self._warm_timers.pop(warm_key, None)
        if timer is not None:
            timer.cancel()
        self._leaders.pop(warm_key, None)
        if self._warm.get(warm_key) == WARMING:
            del self._warm[warm_key]
        self._unpark(self._parked.pop(warm_key, None))

    def _unpark(self, parked: list[Entry] | None) -> None:
        if parked:
            for entry in parked:
                heapq.heappush(self._heap, entry)
            self._kick()

    def _cancel_warm_timers(self) -> None:
        for timer in self._warm_timers.values():
            timer.cancel()
        self._warm_timers.clear()
        self._leaders.clear()

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
