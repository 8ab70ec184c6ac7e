"""Sending one turn: grant → replica's transport → release, retried per the policy.

This is where the scheduler, the router, the retry policy and the wire meet. Every
attempt holds its slot until its stream ends; a failed attempt's partial output is
discarded from the conversation but kept on the turn (:class:`FailedAttempt`) and
announced as a :class:`~agentflow.RetryEvent`, so every turn is accounted for once.

A turn that fails — retries spent, an error that is not retried, or the policy's
``give_up_after_s`` passed while every replica is down — while every replica is judged
down fails with :class:`~agentflow.AllReplicasDown` (from its own last error), which
names each replica and the last error that blamed it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from tenacity import RetryCallState

from agentflow._errors import AllReplicasDown, APIStatusError, TransportError
from agentflow._trace import TurnTrace
from agentflow.sched._retry import RetryPolicy
from agentflow.sched._scheduler import Scheduler, cancel_and_wait
from agentflow.sched._ticket import Grant, Ticket
from agentflow.transport._request import ChatRequest
from agentflow.typing import DeltaKind, DeltaSink

__all__ = ["FailedAttempt", "TurnRunner"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedAttempt:
    """An attempt at a turn that failed and was retried.

    Attributes:
        attempt: 0 for the first try.
        replica: where it was sent.
        error: what happened.
        trace: what arrived before it failed, when anything did (the discarded output).
        wait_s: how long the runner waited before the next attempt.
    """

    attempt: int
    replica: str
    error: TransportError
    trace: TurnTrace | None
    wait_s: float


#: Told about each failed attempt just before the runner waits to retry it.
OnRetry = Callable[[Ticket, FailedAttempt], None]


class _WarmupSink:
    """Passes deltas on, and tells the scheduler at the first one that the leader
    (``grant``) has its first token (the prefix is warm, unless the replica shares it
    only at the end). It counts them on the grant (``Grant.deltas``): the warm-up timeout
    of a replica that shares at the end reads it to tell a leader that streams from one
    that stalled — one attribute per delta, not a timer re-armed."""

    __slots__ = ("_grant", "_inner", "_scheduler")

    def __init__(self, inner: DeltaSink | None, scheduler: Scheduler, grant: Grant) -> None:
        self._inner = inner
        self._scheduler = scheduler
        self._grant = grant

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        grant = self._grant
        grant.deltas += 1
        if self._scheduler is not None:
            key = grant.ticket.prefix_key
            if key is not None:
                self._scheduler.leader_token(key, grant.replica, grant)
            self._scheduler = None  # type: ignore[assignment]
        if self._inner is not None:
            self._inner.on_delta(kind, text, t_ns)


class TurnRunner:
    """Sends turns through a :class:`Scheduler`, retrying per a :class:`RetryPolicy`.

    Args:
        scheduler: grants slots and replicas.
        retry: the retry policy; ``None`` sends each turn once.
        sleep: how to wait between attempts (inject a fake in tests).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        retry: RetryPolicy | None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.scheduler = scheduler
        self.retry = retry
        self._sleep = sleep
        #: Attempts that failed and were retried, fleet-wide.
        self.retries = 0
        #: Retry waits past ``give_up_after_s`` that end when the fleet goes down.
        self._down_waits: set[asyncio.Future[None]] = set()

    async def send(
        self,
        ticket: Ticket,
        request: ChatRequest,
        sink: DeltaSink | None = None,
        on_retry: OnRetry | None = None,
        *,
        first: Grant | BaseException | None = None,
    ) -> tuple[TurnTrace, tuple[FailedAttempt, ...]]:
        """Send ``request`` until it succeeds or the policy gives up.

        Returns the trace and the attempts that failed before it. Raises the last
        error when the policy gives up or the error is not retryable.

        ``first``: the grant of ``ticket`` when it was queued with
        :meth:`Scheduler.offer` (the first attempt uses it instead of acquiring one),
        or the error that failed it there (raised as :meth:`Scheduler.acquire` would).
        """
        scheduler = self.scheduler
        if first is None:
            grant = await scheduler.acquire(ticket)
        elif isinstance(first, BaseException):
            raise first
        else:
            grant = first
        try:  # the first attempt runs without tenacity: ~75 µs a turn saved
            return await self._stream(grant, request, sink), ()
        except TransportError as exc:
            policy = self.retry
            if policy is None or policy.max_attempts == 1 or not policy.retryable(exc):
                down = self._down(exc)
                if down is not None:
                    raise down from exc
                raise
            return await self._retry(  # queued time does not count: from the grant on
                ticket, request, sink, on_retry, policy, exc, grant.replica.name, grant.started_ns
            )

    async def _retry(
        self,
        ticket: Ticket,
        request: ChatRequest,
        sink: DeltaSink | None,
        on_retry: OnRetry | None,
        policy: RetryPolicy,
        error: TransportError,
        replica: str,
        first_began: int,
    ) -> tuple[TurnTrace, tuple[FailedAttempt, ...]]:
        """The first attempt failed with ``error`` on ``replica``: retry with tenacity.

        Kept out of :meth:`send`, whose frame then holds no closure cells while the
        first attempt streams (most turns never come here)."""
        scheduler = self.scheduler
        clock = scheduler.clock
        where = [replica]  # the replica of each attempt, as it is granted one
        began = [first_began]
        replay: list[TransportError] = [error]
        failed: list[FailedAttempt] = []

        async def attempt() -> TurnTrace:
            if replay:  # hand tenacity the failure that already happened
                raise replay.pop()
            ticket.attempt += 1
            if policy.failover and where:
                ticket.exclude = frozenset(where[-1:])
            return await self._once(ticket, request, sink, where, began)

        def before_sleep(state: RetryCallState) -> None:
            outcome = state.outcome
            assert outcome is not None
            err = outcome.exception()
            assert isinstance(err, TransportError)
            record = FailedAttempt(
                attempt=state.attempt_number - 1,
                replica=where[-1] if where else "",
                error=err,
                trace=getattr(err, "trace", None),
                wait_s=state.upcoming_sleep,
            )
            failed.append(record)
            self.retries += 1
            if on_retry is not None:
                on_retry(ticket, record)

        give_up: Callable[[RetryCallState], bool] | None = None
        sleep = self._sleep
        if policy.give_up_after_s is not None:
            # From the first attempt's start: time queued for a slot does not count.
            limit = (began[0] if began else clock()) + int(policy.give_up_after_s * 1e9)

            def give_up(state: RetryCallState) -> bool:
                """While every replica is down, no attempt starts at or after the limit."""
                next_ns = clock() + int(state.upcoming_sleep * 1e9)
                return next_ns >= limit and scheduler.all_down()

            async def sleep(seconds: float) -> None:
                """A wait chosen before the fleet went down is cut at the limit if it has,
                or past the limit when it goes down: one last attempt goes then (and
                ``give_up`` stops after it fails)."""
                before_limit = (limit - clock()) * 1e-9
                if seconds <= before_limit:
                    await self._sleep(seconds)
                    return
                if before_limit > 0:
                    await self._sleep(before_limit)
                if not scheduler.all_down():
                    await self._sleep_until_down(seconds - max(before_limit, 0.0))

        def elsewhere() -> bool:
            return bool(where) and scheduler.elsewhere(where[-1])

        retrying = policy.retrying(
            sleep=sleep, before_sleep=before_sleep, stop=give_up, elsewhere=elsewhere
        )
        try:
            trace: TurnTrace = await retrying(attempt)
        except TransportError as exc:
            down = self._down(exc)
            if down is not None:
                raise down from exc
            raise
        return trace, tuple(failed)

    async def _sleep_until_down(self, seconds: float) -> None:
        """Sleep ``seconds``, or less: until every replica is judged down.

        A turn past its ``give_up_after_s`` waits here (a ``Retry-After`` chosen while the
        fleet was serving). The fleet goes down only at an attempt's failure, which
        :meth:`_stream` reports by waking these waits; checking ``all_down()`` once at
        the limit and sleeping out the rest made the turn end long after it.
        """
        down = asyncio.get_running_loop().create_future()
        self._down_waits.add(down)
        nap = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait((nap, down), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._down_waits.discard(down)
            if not nap.done():
                await cancel_and_wait(nap)  # (raises what the sleep raised, if anything)
            elif not nap.cancelled():
                nap.result()  # (a sleep that failed)

    def _wake_if_down(self) -> None:
        """An attempt failed in a way that blames its replica: if that left every
        replica down, the waits of :meth:`_sleep_until_down` end now."""
        if self._down_waits and self.scheduler.all_down():
            for down in self._down_waits:
                if not down.done():
                    down.set_result(None)

    def routed(self, ticket: Ticket, request: ChatRequest) -> ChatRequest:
        """``request`` with what the router adds for ``ticket``'s session: its session
        header, and ``prompt_cache_key`` when the router sets one. Returned as it is when
        it has them already (a session reuses its routed request from turn to turn)."""
        router = self.scheduler.router
        headers = router.headers(ticket)
        key = ticket.prefix_key if router.prompt_cache_key else None
        if not headers and not router.prompt_cache_key:
            return request
        have = request.headers
        for k, v in headers.items():
            if have.get(k) != v:
                break
        else:
            if key is None or request.extra_body.get("prompt_cache_key") == key:
                return request
        extra = dict(request.extra_body)
        if key is not None:
            extra["prompt_cache_key"] = key
        return replace(request, headers={**have, **headers}, extra_body=extra)

    def _hold(self, grant: Grant, retry_after: float) -> None:
        """With failover, the replica that said ``Retry-After`` gets nothing until then
        while another healthy replica exists (capped like the wait)."""
        policy = self.retry
        if policy is not None and policy.failover:
            self.scheduler.hold(grant.replica, min(retry_after, policy.max_retry_after_s))

    def _down(self, exc: TransportError) -> AllReplicasDown | None:
        """``AllReplicasDown`` if ``exc`` blames its replica and every replica is down."""
        if RetryPolicy.blames_replica(exc) and self.scheduler.all_down():
            return self.scheduler.down_error(exc.endpoint)
        return None

    async def _once(
        self,
        ticket: Ticket,
        request: ChatRequest,
        sink: DeltaSink | None,
        where: list[str],
        began: list[int],
    ) -> TurnTrace:
        scheduler = self.scheduler
        grant = await scheduler.acquire(ticket)
        if not began:
            began.append(scheduler.clock())
        where.append(grant.replica.name)
        return await self._stream(grant, request, sink)

    async def _stream(
        self, grant: Grant, request: ChatRequest, sink: DeltaSink | None
    ) -> TurnTrace:
        """Stream one granted attempt on its replica; the grant is released at its end."""
        scheduler = self.scheduler
        ticket, replica = grant.ticket, grant.replica
        ticket.sent += 1
        request = self.routed(ticket, request)
        if grant.leader and ticket.prefix_key is not None:
            sink = _WarmupSink(sink, scheduler, grant)
        ok: bool | None = None
        used: int | None = None
        error: TransportError | None = None
        try:
            trace = await replica.transport.stream(request, sink)
            ok = True
            usage = trace.usage
            if (
                usage is not None
                and usage.prompt_tokens is not None
                and usage.completion_tokens is not None
            ):
                used = usage.prompt_tokens + usage.completion_tokens
            return trace
        except TransportError as exc:
            ok = not RetryPolicy.blames_replica(exc)
            error = exc
            retry_after = exc.retry_after if isinstance(exc, APIStatusError) else None
            if retry_after is not None and retry_after > 0:
                self._hold(grant, retry_after)
            raise
        finally:
            scheduler.release(grant, used_tokens=used, ok=ok, error=error)
            if ok is False:
                self._wake_if_down()
