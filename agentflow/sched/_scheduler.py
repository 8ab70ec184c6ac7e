"""The scheduler: ready turns wait in one heap; one dispatcher task hands them out.

A session that wants to send a turn calls :meth:`Scheduler.acquire` with a
:class:`Ticket` and gets a :class:`Grant` (a replica and a slot on it) when the
policy, the limits and the router agree. When nothing is queued and everything has
room, the grant is immediate (no task switch). Otherwise the ticket is ranked once by
the policy and pushed on a heap, and the single dispatcher task (the only waiter on
rate buckets, whatever the number of sessions) pops the best ticket whenever a slot
frees, a bucket refills, or a breaker lets a probe through.

Slots are held until the stream ends — never released when the request is sent —
so ``max_in_flight`` counts streaming requests exactly.

**Prefix warm-up.** When many sessions share a prefix the server has not cached, the
first one is sent alone and the rest wait until its first token arrives (its prefill
is done, the prefix is in the KV cache), then fan out and hit the cache instead of
all prefilling the same tokens at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Sequence

from agentflow._errors import AllReplicasDown, ConfigError, TransportError
from agentflow._logging import get_logger
from agentflow.sched._limits import Limits, RateGate
from agentflow.sched._policy import FCFS, Policy
from agentflow.sched._replica import Replica, ReplicaState, check_unique
from agentflow.sched._router import Router
from agentflow.sched._ticket import Grant, SchedulerState, Ticket, Waiter
from agentflow.typing import Clock

__all__ = ["Scheduler"]

_log = get_logger("agentflow.sched")

_WARMING, _WARM = 1, 2
_Entry = tuple[float, int, Ticket, Waiter]


class Scheduler:
    """Orders ready turns by ``policy`` and dispatches them under the limits.

    Args:
        replicas: where turns may go.
        policy: ranks tickets (:mod:`agentflow.sched` ships FCFS, FairShare, PLAS,
            Priority and Deadline).
        limits: fleet-wide caps over all replicas.
        router: picks a replica per turn.
        clock: nanosecond monotonic clock.
        prefix_warmup: send one request per cold shared prefix first.
    """

    def __init__(
        self,
        replicas: Sequence[Replica],
        *,
        policy: Policy | None = None,
        limits: Limits | None = None,
        router: Router | None = None,
        clock: Clock,
        prefix_warmup: bool = True,
    ) -> None:
        if not replicas:
            raise ConfigError("a fleet needs at least one replica (transport)")
        self.replicas = [ReplicaState(r, clock) for r in replicas]
        check_unique(self.replicas)
        self.policy: Policy = policy if policy is not None else FCFS()
        self.limits = limits if limits is not None else Limits()
        if self.limits.kv_tokens is not None:  # it would be ignored: only replicas check it
            raise ConfigError(
                "Limits.kv_tokens is a budget per server: set it on Replica(limits=...), "
                "not on the fleet"
            )
        self.router = router if router is not None else Router()
        self.prefix_warmup = prefix_warmup
        self._clock = clock
        self._rates: RateGate | None = self.limits.gate()
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._warm: dict[str, int] = {}
        self._parked: dict[str, list[_Entry]] = {}
        self._pump: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._busy = False
        # The ticket the dispatcher popped and waits on a bucket for: in no queue, so
        # aclose and a crashed dispatcher must settle its waiter from here.
        self._granting: Waiter | None = None
        self.state = SchedulerState()
        #: Requests streaming now, fleet-wide, and the most there ever were.
        self.in_flight = 0
        self.peak_in_flight = 0
        #: Turns dispatched so far.
        self.dispatched = 0

    @property
    def waiting(self) -> int:
        """Tickets queued or parked behind a warming prefix."""
        return len(self._heap) + sum(len(p) for p in self._parked.values())

    async def acquire(self, ticket: Ticket) -> Grant:
        """Wait until ``ticket`` may be sent; the caller must :meth:`release` the grant."""
        rank = self._rank(ticket)
        if not self._heap and not self._busy:
            grant = await self._try_now(ticket, rank)
            if grant is not None:
                return grant
        fut: asyncio.Future[Grant] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (rank, ticket.seq, ticket, fut))
        self._kick()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as we were cancelled
                self.release(fut.result(), used_tokens=None, ok=None)
            raise

    async def offer(self, ticket: Ticket, waiter: Waiter) -> None:
        """Queue ``ticket`` like :meth:`acquire`, without waiting: ``waiter`` gets the
        grant (``set_result``, at once when there is room) when its turn comes.

        Ranked, ordered and granted exactly as an :meth:`acquire` at this moment would
        be; it never suspends. A fleet queues its sessions' first turns this way, so a
        queued session needs no task until it may start.
        """
        rank = self._rank(ticket)
        if not self._heap and not self._busy:
            grant = await self._try_now(ticket, rank)
            if grant is not None:
                waiter.set_result(grant)
                return
        heapq.heappush(self._heap, (rank, ticket.seq, ticket, waiter))
        self._kick()

    def _rank(self, ticket: Ticket) -> float:
        state = self.state
        state.now_ns = self._clock()
        ticket.seq = next(self._seq)
        ticket.attained_ns = state.attained_ns.get(ticket.session_id, 0)
        return self.policy(ticket, state)

    def release(
        self,
        grant: Grant,
        *,
        used_tokens: int | None,
        ok: bool | None,
        error: TransportError | None = None,
    ) -> None:
        """The granted stream ended.

        Args:
            grant: what :meth:`acquire` returned.
            used_tokens: prompt + output tokens the server reported, to settle token limits.
            ok: ``True`` the replica answered; ``False`` it failed in a way that blames it
                (opens its breaker after enough); ``None`` no verdict (cancelled).
            error: what failed: with ``ok`` ``False``, kept as the replica's last error;
                with ``ok`` ``True``, an answer that does not blame it (a 429, another
                4xx), which counts as ``rejected``, not ``served``.
        """
        ticket, replica = grant.ticket, grant.replica
        replica.finish(ticket)
        self.in_flight -= 1
        now = self._clock()
        attained = self.state.attained_ns
        attained[ticket.session_id] = attained.get(ticket.session_id, 0) + now - grant.started_ns
        if ok:
            if error is None:
                replica.served += 1
            else:
                replica.rejected += 1
            replica.breaker.on_success(grant.probe)
        elif ok is False:
            replica.failures += 1
            if error is not None:
                replica.last_error = error
            # The last closed breaker never opens: the router would have nowhere to send,
            # and every turn would queue behind one probe — worse than no breaker.
            others = any(r is not replica and r.breaker.state == "closed" for r in self.replicas)
            replica.breaker.on_failure(grant.probe, may_open=others)
        else:
            replica.breaker.on_abandon(grant.probe)
        if used_tokens is not None:
            for rates in (self._rates, replica.rates):
                if rates is not None:
                    rates.settle(ticket.tokens, used_tokens)
        if grant.leader and ticket.prefix_key is not None:
            self.warmed(ticket.prefix_key)
        self._kick()

    def warmed(self, prefix_key: str) -> None:
        """The prefix's first request has its first token: release the sessions waiting on it."""
        if self._warm.get(prefix_key) == _WARM:
            return
        self._warm[prefix_key] = _WARM
        parked = self._parked.pop(prefix_key, None)
        if parked:
            for entry in parked:
                heapq.heappush(self._heap, entry)
            self._kick()

    @property
    def clock(self) -> Clock:
        """The nanosecond clock the scheduler and its breakers read."""
        return self._clock

    def all_down(self) -> bool:
        """Whether every replica is judged down (its breaker open, or held closed failing)."""
        return all(r.breaker.failing for r in self.replicas)

    def down_error(self, endpoint: str | None = None) -> AllReplicasDown:
        """An :class:`AllReplicasDown` naming every replica and its last error."""
        return AllReplicasDown({r.name: r.last_error for r in self.replicas}, endpoint=endpoint)

    def hold(self, replica: ReplicaState, seconds: float) -> None:
        """``replica`` asked for ``seconds`` of quiet (a ``Retry-After``): the router
        sends it nothing until then while another healthy replica exists."""
        until = self._clock() + int(seconds * 1e9)
        replica.held_until_ns = max(replica.held_until_ns, until)

    def elsewhere(self, name: str) -> bool:
        """Whether a healthy replica other than ``name``, and not held, could take a turn
        (a retry failing over from ``name`` need not wait out its ``Retry-After``)."""
        return any(r.name != name and r.breaker.allows() and not r.held_ns() for r in self.replicas)

    def forget(self, session_id: str) -> None:
        """The session ended: drop what was kept about it."""
        self.state.attained_ns.pop(session_id, None)
        self.router.forget(session_id)

    async def aclose(self) -> None:
        """Stop the dispatcher; queued tickets are cancelled, and so is the one it was
        waiting on a rate bucket for."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
            self._pump = None
        granting, self._granting = self._granting, None
        if granting is not None:
            granting.cancel()
        for _, _, _, fut in itertools.chain(self._heap, *self._parked.values()):
            fut.cancel()
        self._heap.clear()
        self._parked.clear()

    # -- dispatch -----------------------------------------------------------------

    async def _try_now(self, ticket: Ticket, rank: float) -> Grant | None:
        """Grant at once if nothing is queued, a replica has room and no bucket is empty."""
        key = ticket.prefix_key
        if self.prefix_warmup and key is not None and self._warm.get(key) == _WARMING:
            return None
        replica = self._place(ticket)
        if replica is None:
            return None
        for rates in (self._rates, replica.rates):
            if rates is not None and not rates.ready(ticket.tokens):
                return None
        for rates in (self._rates, replica.rates):
            if rates is not None:
                await rates.take(ticket.tokens)  # has room: returns without suspending
        return self._start(ticket, replica, rank)

    def _place(self, ticket: Ticket) -> ReplicaState | None:
        cap = self.limits.max_in_flight
        if cap is not None and self.in_flight >= cap:
            return None
        return self.router.choose(ticket, self.replicas)

    def _start(self, ticket: Ticket, replica: ReplicaState, rank: float) -> Grant:
        probe = replica.start(ticket)
        self.router.placed(ticket, replica)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.dispatched += 1
        state = self.state
        state.last_key = rank
        state.dispatched[ticket.agent] = state.dispatched.get(ticket.agent, 0) + 1
        leader = False
        key = ticket.prefix_key
        if self.prefix_warmup and key is not None and key not in self._warm:
            self._warm[key] = _WARMING
            leader = True
        return Grant(ticket, replica, self._clock(), leader, probe)

    def _kick(self) -> None:
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
        heap = self._heap
        while True:
            if not heap:
                await self._sleep(None)
                continue
            rank, _, ticket, fut = entry = heap[0]
            if fut.done():  # its session was cancelled while queued
                heapq.heappop(heap)
                continue
            key = ticket.prefix_key
            if self.prefix_warmup and key is not None and self._warm.get(key) == _WARMING:
                heapq.heappop(heap)
                self._parked.setdefault(key, []).append(entry)
                continue
            replica = self._place(ticket)
            if replica is None:
                await self._sleep(self._wake_in_s(ticket))
                continue
            heapq.heappop(heap)
            grant = self._start(ticket, replica, rank)
            self._busy = True
            self._granting = fut
            try:
                for rates in (self._rates, replica.rates):
                    if rates is not None:
                        await rates.take(ticket.tokens)
            except BaseException:  # aclose cancels the waiter; _pump_ended fails it
                self.release(grant, used_tokens=None, ok=None)
                raise
            finally:
                self._busy = False
            self._granting = None
            if fut.done():
                self.release(grant, used_tokens=None, ok=None)
            else:
                grant.started_ns = self._clock()  # the bucket wait is not model service
                fut.set_result(grant)

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
        for a preference (failover), and only a release changes that.
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

    def __repr__(self) -> str:
        return (
            f"Scheduler(policy={type(self.policy).__name__}, in_flight={self.in_flight}, "
            f"waiting={self.waiting}, replicas={len(self.replicas)})"
        )


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
