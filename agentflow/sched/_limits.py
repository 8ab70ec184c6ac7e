"""Limits: requests in flight, requests per minute, tokens per minute, KV tokens in flight.

:class:`Limits` is the configuration (per fleet or per replica); :class:`RateGate` is
its runtime. Rates use aiolimiter's leaky bucket, whose ``acquire(amount)`` is the
weighted acquire token limits need. Only the scheduler's dispatcher ever waits on a
bucket — never one task per session — so 10,000 queued sessions cost nothing while
they wait (asyncio-throttle, which the product was first specified with, has every
waiter poll with ``sleep(0.01)``; see docs/architecture.md). It waits on the fleet's
buckets only (:meth:`RateGate.take`): a replica's are part of its room, and charged
without waiting (:meth:`RateGate.charge_now`).

A bucket holds ``burst_s`` seconds of its rate, so over any window of ``W`` seconds
at most ``rate × W + burst`` units pass — across a fleet's runs too: a
:class:`~agentflow.Fleet` keeps its gates (and their debt) from one run to the next
(``_carry.py``).

Token weight: a request is charged its estimated prompt tokens plus its maximum
output when it is dispatched. When the server's usage says it used more, the
difference is charged with the next dispatch (a debt), so the long-run rate holds
even when estimates are low. Unused reservation is not given back (aiolimiter has no
release), which errs on the side of staying under the limit.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from dataclasses import dataclass
from typing import Any

from aiolimiter import AsyncLimiter

from agentflow._counts import check_count
from agentflow._errors import ConfigError

__all__ = ["Limits", "RateGate", "clock_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Caps on what is sent; ``None`` means no cap.

    Attributes:
        max_in_flight: requests streaming at once. Released only when a stream ends.
        rpm: requests started per minute.
        tpm: tokens per minute, weighted by estimated prompt + max output per request,
            corrected by the usage the server reports.
        kv_tokens: prompt + max output tokens of the requests in flight at once (a KV
            budget, e.g. from ``agentflow plan``). Only for a replica's limits.
        burst_s: how many seconds of ``rpm``/``tpm`` may go out at once.

    A request's max output is its agent's ``max_completion_tokens`` (else
    ``max_tokens``); an agent that sets neither is charged 1,024 output tokens
    (``DEFAULT_MAX_OUTPUT_TOKENS``) for ``tpm`` and ``kv_tokens``, though its requests
    carry no cap and the server may generate more (``tpm`` is charged the rest as a debt,
    from the usage; ``kv_tokens`` is not).
    """

    max_in_flight: int | None = None
    rpm: float | None = None
    tpm: float | None = None
    kv_tokens: int | None = None
    burst_s: float = 1.0

    def __post_init__(self) -> None:
        check_count(self.max_in_flight, "Limits.max_in_flight", none="no cap")
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not (_number(value) and 0 < value < math.inf):
                raise ConfigError(
                    f"Limits.{name} must be a finite number > 0 (None: no cap), got {value!r}"
                )
        check_count(self.kv_tokens, "Limits.kv_tokens", none="no cap")
        if not (_number(self.burst_s) and 0 < self.burst_s < math.inf):
            raise ConfigError(f"Limits.burst_s must be a finite number > 0, got {self.burst_s!r}")
        for name in ("rpm", "tpm"):  # each finite, yet their bucket may not be
            value = getattr(self, name)
            if value is not None and not _shape_ok(*_shape(value, self.burst_s)):
                raise ConfigError(
                    f"Limits.{name}={value!r} with burst_s={self.burst_s!r} makes a bucket "
                    "whose capacity or drain rate overflows (or underflows) a float"
                )

    def gate(self) -> RateGate | None:
        """A fresh runtime for the rate limits, or ``None`` when there are none."""
        if self.rpm is None and self.tpm is None:
            return None
        return RateGate(self.rpm, self.tpm, self.burst_s)


def _number(value: Any) -> bool:
    """Whether ``value`` is a real number (not a bool, not a string)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


_running_loop = asyncio.get_running_loop  # (one lookup less per leak)

#: The shortest wait for a bucket (s): a deficit of a few ulps must still move the clock.
_MIN_WAIT_S = 1e-6


class _Bucket(AsyncLimiter):
    """aiolimiter's leaky bucket, whose one waiter (the dispatcher) sets its own timer.

    aiolimiter's waker re-arms at ``last drain + deficit / rate``; the level drains in
    float arithmetic, so the deficit left at that time can be a few ulps, and the timer
    lands on "now". A real clock moves on by itself; a virtual one
    (:class:`~agentflow.embedded.VirtualTimeLoop`) moves only when a timer lies ahead, so
    the waker would re-arm at the same instant forever. :meth:`charge` waits at least
    ``_MIN_WAIT_S``, and only calls ``acquire`` once the amount fits.
    """

    __slots__ = ("_clock", "_seen")

    def __init__(self, max_rate: float, time_period: float) -> None:
        super().__init__(max_rate, time_period)
        #: Whose clock ``_last_check`` was read on (:func:`clock_of`; None: not yet).
        self._clock: object = None
        #: The loop of the last leak (a weak reference: a fleet's bucket outlives it).
        self._seen: weakref.ref[asyncio.AbstractEventLoop] | None = None

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        """The running loop: a fleet keeps its buckets across its runs, each on its own
        loop (aiolimiter's own keeps the first, and warns once it is closed)."""
        return asyncio.get_running_loop()

    def _leak(self) -> None:
        """Drain the level for the time since the last leak — none when that was read
        on another clock (a new virtual loop, which starts near 0 again), or the clock
        is behind it: a negative elapsed time would raise the level.

        Which clock a loop reads is worked out once per loop, not per leak (a turn
        leaks ~10 times with rpm and tpm on the fleet and on its replica)."""
        loop = _running_loop()
        now = loop.time()
        seen = self._seen
        if seen is None or seen() is not loop:  # another loop than the last leak's
            self._seen, clock = weakref.ref(loop), clock_of(loop)
            if clock != self._clock:  # another clock: nothing to drain by
                self._last_check, self._clock = now, clock
                return
        if self._level:
            elapsed = now - self._last_check
            if elapsed > 0:
                level = self._level - elapsed * self._rate_per_sec
                self._level = level if level > 0 else 0.0
        self._last_check = now

    def wait_s(self, amount: float) -> float:
        """Seconds until ``amount`` fits in the bucket (0 if it fits now)."""
        self._leak()
        return max(0.0, self._level + amount - self.max_rate) / self._rate_per_sec

    def force(self, amount: float) -> None:
        """Add ``amount`` to the level now, past the capacity if need be: an overdraft,
        which drains as any level does (:meth:`wait_s` counts it)."""
        self._leak()
        self._level += amount

    async def charge(self, amount: float) -> None:
        """Wait until ``amount`` fits, then add it to the level."""
        while (wait := self.wait_s(amount)) > 0:  # noqa: ASYNC110 - a computed wait, not a poll
            await asyncio.sleep(max(wait, _MIN_WAIT_S))
        await self.acquire(amount)  # it fits: returns without waiting


#: The clock of every loop whose ``time()`` is asyncio's own (``time.monotonic()``).
_MONOTONIC = "monotonic"


def clock_of(loop: asyncio.AbstractEventLoop) -> object:
    """Which clock ``loop.time()`` reads: every loop on asyncio's own ``time()`` shares
    ``time.monotonic()``, and so does uvloop's (libuv's ``CLOCK_MONOTONIC``, to the
    millisecond); any other loop with a ``time()`` of its own (a
    :class:`~agentflow.embedded.VirtualTimeLoop`) is a clock of its own."""
    kind = type(loop)
    if kind.time is asyncio.BaseEventLoop.time or kind.__module__.startswith("uvloop"):
        return _MONOTONIC
    return weakref.ref(loop)


def _shape(per_minute: float, burst_s: float, floor: float = 1.0) -> tuple[float, float]:
    """A bucket's capacity (``burst_s`` seconds of the rate, at least ``floor``) and the
    seconds it takes to drain."""
    capacity = max(per_minute / 60.0 * burst_s, floor)
    return capacity, capacity / (per_minute / 60.0)


def _shape_ok(capacity: float, period_s: float) -> bool:
    """Whether a bucket's capacity and drain time are finite and it drains at all: a
    finite rate and burst whose product overflows gave a capacity of inf and a drain
    rate of NaN, and a rate under ~1e-300 a drain time of inf (the run never ended)."""
    return math.isfinite(capacity) and math.isfinite(period_s) and capacity / period_s > 0


def _bucket(per_minute: float, burst_s: float, floor: float) -> _Bucket:
    return _Bucket(*_shape(per_minute, burst_s, floor))


class RateGate:
    """The request and token buckets of one :class:`Limits`. Only the dispatcher waits."""

    __slots__ = ("_debt", "_requests", "_tokens", "charged_tokens", "started")

    def __init__(self, rpm: float | None, tpm: float | None, burst_s: float) -> None:
        self._requests = _bucket(rpm, burst_s, 1.0) if rpm is not None else None
        self._tokens = _bucket(tpm, burst_s, 1.0) if tpm is not None else None
        self._debt = 0.0
        #: Requests let through so far.
        self.started = 0
        #: Tokens charged so far (reservations + debts).
        self.charged_tokens = 0.0

    def ready(self, tokens: int) -> bool:
        """Whether a request of ``tokens`` could go now without waiting.

        The whole charge (``tokens`` plus any debt) must fit: one bigger than the bucket
        is charged in bucket-fulls by :meth:`take`, which waits.
        """
        if self._requests is not None and not self._requests.has_capacity(1):
            return False
        return self._tokens is None or self._tokens.has_capacity(tokens + self._debt)

    def wait_s(self, tokens: int) -> float:
        """Seconds until a request of ``tokens`` could start on a replica with these
        limits (0: now).

        The request bucket must have room for one, and the token bucket for the whole
        charge (``tokens`` plus any debt) — or, for a charge bigger than the bucket, be
        empty: :meth:`charge_now` then overdraws it, and the next request waits here
        until the overdraft has drained. The router skips a replica whose wait is not 0,
        and the dispatcher sleeps until the earliest one's refill when every replica
        with room is waiting.
        """
        wait = 0.0
        if self._requests is not None:
            wait = self._requests.wait_s(1)
        if self._tokens is not None:
            wait = max(wait, self._tokens.wait_s(self._clamp(tokens + self._debt)))
        return wait

    async def take(self, tokens: int) -> None:
        """Wait until one request of ``tokens`` may go, and charge it (plus any debt):
        how the fleet's charge is taken, by the dispatcher."""
        if self._requests is not None:
            await self._requests.charge(1)
        if self._tokens is not None:
            debt = self._debt
            amount = tokens + debt
            self._debt = 0.0
            try:
                while amount > 0:  # one bigger than the bucket is charged in bucket-fulls
                    part = self._clamp(amount)
                    await self._tokens.charge(part)
                    amount -= part
            except BaseException:  # cancelled: the debt not charged yet is still owed
                self._debt += max(0.0, min(debt, amount))
                raise
            self.charged_tokens += tokens
        self.started += 1

    def charge_now(self, tokens: int) -> None:
        """Charge one request of ``tokens`` (plus any debt) now, never waiting: how a
        replica's charge is taken, once :meth:`wait_s` is 0.

        A charge bigger than the room left overdraws the bucket (its level goes past
        its capacity) and :meth:`wait_s` keeps the next request out until that has
        drained: the same tokens over the same time as :meth:`take`'s waiting for them
        first, without the dispatcher — and with it every other replica — waiting.
        """
        if self._requests is not None:
            self._requests.force(1)
        if self._tokens is not None:
            self._tokens.force(tokens + self._debt)
            self._debt = 0.0
            self.charged_tokens += tokens
        self.started += 1

    def settle(self, reserved: int, used: int) -> None:
        """The server says a request charged ``reserved`` used ``used`` tokens."""
        if self._tokens is not None and used > reserved:
            self._debt += used - reserved
            self.charged_tokens += used - reserved

    def drain(self) -> None:
        """Drain the buckets for the time since they were last read (a new run of the
        fleet that keeps them: :class:`~agentflow.sched._carry.Carry`)."""
        for bucket in (self._requests, self._tokens):
            if bucket is not None:
                bucket._leak()

    def _clamp(self, amount: float) -> float:
        assert self._tokens is not None
        return min(amount, self._tokens.max_rate)
