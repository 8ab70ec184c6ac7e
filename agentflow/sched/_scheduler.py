"""The scheduler: ready turns wait in one heap; one dispatcher task hands them out.

A session that wants to send a turn calls :meth:`Scheduler.acquire` with a
:class:`Ticket` and gets a :class:`Grant` (a replica and a slot on it) when the
policy, the limits and the router agree. When nothing is queued and everything has
room, the grant is immediate (no task switch). Otherwise the ticket is ranked once by
the policy and pushed on a heap, and the single dispatcher task (the only waiter on
rate buckets, whatever the number of sessions) pops the best ticket whenever a slot
frees, a bucket refills, or a breaker lets a probe through (that task and the queue
it grants from are the scheduler's base class, ``_dispatch.py``).

Slots are held until the stream ends — never released when the request is sent —
so ``max_in_flight`` counts streaming requests exactly.

**Prefix warm-up.** When many sessions share a prefix a replica has not cached, the
first one placed there is sent alone and the rest placed there wait until its first
token arrives (its prefill is done, the prefix is in that server's KV cache), then go
and hit the cache instead of all prefilling the same tokens at once. Warm-up is per
replica (``_warmups.py``): the overflow a warm replica has no room for leads a warm-up
of its own on the next one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import numbers
from collections.abc import Sequence

from agentflow._counts import check_flag
from agentflow._errors import AllReplicasDown, ConfigError, TransportError
from agentflow._logging import get_logger
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds, shown
from agentflow.sched._carry import Carry
from agentflow.sched._dispatch import Dispatcher
from agentflow.sched._limits import Limits, RateGate
from agentflow.sched._policy import FCFS, Policy
from agentflow.sched._replica import Replica, ReplicaState, check_unique
from agentflow.sched._router import Router
from agentflow.sched._ticket import Grant, SchedulerState, Ticket, Waiter
from agentflow.sched._warmups import WARM, WARMUP_TIMEOUT_S
from agentflow.typing import Clock

__all__ = ["Scheduler", "cancel_and_wait", "check_warmup_timeout"]

_log = get_logger("agentflow.sched")


class Scheduler(Dispatcher):
    """Orders ready turns by ``policy`` and dispatches them under the limits.

    Args:
        replicas: where turns may go.
        policy: ranks tickets (:mod:`agentflow.sched` ships FCFS, FairShare, PLAS,
            Priority and Deadline).
        limits: fleet-wide caps over all replicas.
        router: picks a replica per turn.
        clock: nanosecond monotonic clock.
        prefix_warmup: send one request per cold shared prefix and replica first.
        warmup_timeout_s: how long the requests parked behind a prefix's leader wait for
            its first token before they go anyway (default 20 s; ``None``: until its
            stream ends) — on a replica that shares at the end, also how long the leader
            may then go without a delta.
        carry: the rate buckets (fleet's and replicas') and the replicas' ``Retry-After``
            holds to use, kept by a fleet across its runs; ``None``: new ones.
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
        warmup_timeout_s: float | None = WARMUP_TIMEOUT_S,
        carry: Carry | None = None,
    ) -> None:
        super().__init__()
        if not replicas:
            raise ConfigError("a fleet needs at least one replica (transport)")
        self.replicas = [ReplicaState(r, clock, carry) for r in replicas]
        check_unique(self.replicas)
        self.policy: Policy = policy if policy is not None else FCFS()
        self.limits = limits if limits is not None else Limits()
        if self.limits.kv_tokens is not None:  # it would be ignored: only replicas check it
            raise ConfigError(
                "Limits.kv_tokens is a budget per server: set it on Replica(limits=...), "
                "not on the fleet"
            )
        self.router = router if router is not None else Router()
        self.prefix_warmup = check_flag(prefix_warmup, "Scheduler.prefix_warmup")
        self.warmup_timeout_s = check_warmup_timeout(warmup_timeout_s, "Scheduler.warmup_timeout_s")
        self._clock = clock
        self._rates: RateGate | None = (
            carry.fleet(self.limits) if carry is not None else self.limits.gate()
        )
        self._seq = itertools.count()
        self.state = SchedulerState()
        #: Requests streaming now, fleet-wide, and the most there ever were (a ticket
        #: waiting on the fleet's buckets is not one yet: :attr:`claimed` counts its slot).
        self.in_flight = 0
        self.peak_in_flight = 0
        #: Turns dispatched so far.
        self.dispatched = 0

    @property
    def waiting(self) -> int:
        """Tickets queued or parked behind a warming prefix, and the one the dispatcher
        holds while it waits on the fleet's rate buckets (not in flight yet).

        An ``acquire`` cancelled while queued is counted until the dispatcher drops it,
        which it does at once unless a ticket that still waits is ahead of it: so this
        is 0 whenever nothing waits (a worker gives back spare slots only then).
        """
        held = self._granting is not None
        return len(self._heap) + sum(len(p) for p in self._parked.values()) + held

    @property
    def claimed(self) -> int:
        """Slots taken: the requests in flight, and the slot kept for the ticket the
        dispatcher holds while it waits on the fleet's rate buckets (nothing else is
        granted meanwhile, so it has that slot when its charge is paid)."""
        return self.in_flight + (self._granting is not None)

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
            else:  # still queued: wake the dispatcher to drop it, if it is at the head
                self._kick()
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
        rank = self.policy(ticket, state)
        if type(rank) is not float or rank != rank:  # (the common case: one check)
            _check_rank(rank, self.policy, ticket)
        return rank

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
                4xx), which counts as ``rejected``, not ``served`` — and, for a prefix's
                leader with no token yet, does not warm its prefix: the prefix is cold
                there again, and one of the requests parked behind it leads anew.
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
            verdict = ok
            if ok and error is not None and not grant.deltas:
                verdict = None  # rejected (a 429, another 4xx) before any token: no prefill
            self._leader_ended(grant, ticket.prefix_key, verdict)
        if self._parked:
            self._reoffer(replica)
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
        replica.hold.extend(self._clock(), seconds)

    def elsewhere(self, name: str) -> bool:
        """Whether a healthy replica other than ``name``, and not held, could take a turn
        (a retry failing over from ``name`` need not wait out its ``Retry-After``)."""
        return any(r.name != name and r.breaker.allows() and not r.held_ns() for r in self.replicas)

    def forget(self, session_id: str) -> None:
        """The session ended: drop what was kept about it."""
        self.state.attained_ns.pop(session_id, None)
        self.router.forget(session_id)
        self._warm.forget_session(session_id)

    async def aclose(self) -> None:
        """Stop the dispatcher; queued tickets are cancelled, and so is the one it was
        waiting on a rate bucket for.

        Only the dispatcher's own cancellation is swallowed: a cancel of the caller's,
        requested before (a Ctrl-C during a sync callback) or while it waits for the
        dispatcher to end (a run cancelled as it ends), is raised once the queue is
        cleared (:func:`cancel_and_wait`)."""
        try:
            if self._pump is not None:
                try:
                    await cancel_and_wait(self._pump)
                finally:
                    self._pump = None
        finally:
            granting, self._granting = self._granting, None
            if granting is not None:
                granting.cancel()
            for _, _, _, fut in itertools.chain(self._heap, *self._parked.values()):
                fut.cancel()
            self._heap.clear()
            self._parked.clear()
            self._prepaid.clear()
            self._cancel_warm_timers()

    # -- dispatch -----------------------------------------------------------------

    async def _try_now(self, ticket: Ticket, rank: float) -> Grant | None:
        """Grant at once if nothing is queued, a replica has room and the fleet's
        buckets can take the whole charge."""
        replica = self._place(ticket)
        if replica is None:
            return None
        replica = self._go(ticket, replica)
        if replica is None:
            return None
        rates = self._rates
        if rates is not None:
            if not rates.ready(ticket.tokens):
                return None
            await rates.take(ticket.tokens)  # has room: returns without suspending
        if replica.rates is not None:  # the router saw room: never waits
            replica.rates.charge_now(ticket.tokens)
        return self._start(ticket, replica, rank)

    def _place(self, ticket: Ticket) -> ReplicaState | None:
        cap = self.limits.max_in_flight
        if cap is not None and self.in_flight >= cap:
            return None
        return self.router.choose(ticket, self.replicas)

    def _start(self, ticket: Ticket, replica: ReplicaState, rank: float) -> Grant:
        probe = replica.start(ticket)
        key = ticket.prefix_key
        keep = self.router.affinity(key) if key is not None and self.prefix_warmup else None
        self.router.placed(ticket, replica)
        leads = self._leads(ticket, replica)
        # A leader elsewhere leaves the affinity on a replica its prefix is warm on.
        if leads and keep is not None and self._warm.get((key or "", keep.name)) == WARM:
            self.router.pin(key or "", keep)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.dispatched += 1
        state = self.state
        state.last_key = rank
        state.dispatched[ticket.agent] = state.dispatched.get(ticket.agent, 0) + 1
        grant = Grant(ticket, replica, self._clock(), leads, probe)
        if leads:
            self._leaders[key or "", replica.name] = grant
        return grant

    def __repr__(self) -> str:
        return (
            f"Scheduler(policy={type(self.policy).__name__}, in_flight={self.in_flight}, "
            f"waiting={self.waiting}, replicas={len(self.replicas)})"
        )


def check_warmup_timeout(value: object, name: str) -> float | None:
    """``value`` as a warm-up wait: ``None`` (until the leader's stream ends), or a finite
    number of seconds > 0 (up to :data:`~agentflow._seconds.MAX_TIMEOUT_S`).

    Raises:
        ConfigError: naming ``name`` and the value.
    """
    return None if value is None else check_seconds(value, name, 1e-3, MAX_TIMEOUT_S)


async def cancel_and_wait(task: asyncio.Task[object]) -> None:
    """Cancel ``task`` and wait until it has ended; its own cancellation is swallowed,
    what else it raised is raised.

    A cancel of the caller's — one requested before the wait (a Ctrl-C arriving while a
    sync callback ran: ``asyncio.run`` cancels its main task) or during it (a deadline,
    a second Ctrl-C) — is raised once ``task`` has ended; ``await task`` folded a pending
    one into ``task``'s cancellation (the caller's ``cancelling()`` did not grow, so the
    cancel was swallowed, the Ctrl-C lost). Each such cancel also cancels ``task`` once
    more, so that its cleanup hurries: a store's shielded flush gives up (it goes on in
    the background, its failure logged) — a deadline otherwise could not end the wait
    for a flush on a dead server. What ``task`` raised besides is logged then
    (``run.failed_after_cancel``): the caller's cancel is what it gets.

    Raises:
        CancelledError: the caller was cancelled (after ``task`` ended).
    """
    task.cancel()
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})  # raises only the caller's cancel
        except asyncio.CancelledError:
            interrupted = True
            task.cancel()  # (its cleanup, ending already, hurries)
    if interrupted:
        if not task.cancelled() and (exc := task.exception()) is not None:
            _log.warning("run.failed_after_cancel", error=f"{type(exc).__name__}: {exc}")
        raise asyncio.CancelledError
    if not task.cancelled():
        task.result()


def _check_rank(rank: object, policy: Policy, ticket: Ticket) -> None:
    """A rank the heap can order: a real number (not a bool), not NaN, that a float can
    hold (``inf`` is one).

    ``None`` or a string made the heap's comparisons raise, in the dispatcher (which
    died of it) or in another session's ``acquire``; a NaN compares false with
    everything and silently reordered the tickets queued around it; an int past a
    float's range (``10**400``) raised a bare ``OverflowError`` here.

    Raises:
        ConfigError: naming the policy, the session and the rank.
    """
    if not isinstance(rank, bool) and isinstance(rank, numbers.Real):
        try:
            if not math.isnan(rank):
                return
        except OverflowError:  # too large for a float
            pass
    name = getattr(policy, "__name__", None) or type(policy).__name__
    raise ConfigError(
        f"scheduling policy {name} ranked a turn of session {ticket.session_id!r} "
        f"{shown(rank)}: a rank must be a real number (not NaN) that a float can hold"
    )
