"""What a fleet's limits carry from one run to the next.

A :class:`~agentflow.Fleet` builds a new :class:`~agentflow.sched.Scheduler` for each
run (``run``, ``stream``, ``resume``), but its limits are the fleet's, not the run's:
the RPM/TPM buckets of the fleet and of each replica, the token debt they are owed,
and each replica's ``Retry-After`` hold. A :class:`Carry` keeps them on the fleet and
hands them to each run's scheduler; built afresh per run, a fleet running one batch per
``run`` call sent a whole bucket each time (30 runs of one request under ``rpm=60``:
30 requests in 3 s), and a replica that had answered ``Retry-After: 30`` got traffic as
soon as the next run started.

A run's clock may not be the last one's: buckets read the running loop's ``time()``,
and a fleet's clock may be the loop's too (``loop_clock``) — on a
:class:`~agentflow.embedded.VirtualTimeLoop`, which restarts near 0 each run. Every
loop on asyncio's own ``time()`` (and uvloop's) shares ``time.monotonic()``; a loop
with a clock of its own (``_limits.clock_of``) is judged to share nothing with the
last one: no time passed between the two runs. A bucket then drains nothing for the
gap. A :class:`Hold` runs on the fleet's clock: it goes on across loops when that
clock is not a loop's (the default ``time.perf_counter_ns``); only when the fleet's
clock read the last run's loop and reads this one's, and the two loops' clocks differ,
does it keep the time it had left at the last run's end (:meth:`Carry.end`).
"""

from __future__ import annotations

import asyncio

from agentflow.sched._limits import Limits, RateGate, _Bucket, _bucket, clock_of
from agentflow.typing import Clock

__all__ = ["Carry", "Hold"]

#: How close (ns) the fleet's clock must read to the loop's ``time()`` to be its clock
#: (``loop_clock`` reads it exactly; a clock of its own is seconds off, or more).
_SAME_NS = 1_000_000


class Hold:
    """A replica's ``Retry-After`` hold: until when (clock ns) the router avoids it."""

    __slots__ = ("_seen_ns", "until_ns")

    def __init__(self) -> None:
        #: The end of the hold, on the clock (0: no hold).
        self.until_ns = 0
        self._seen_ns = 0  # when it was last read

    def left_ns(self, now_ns: int) -> int:
        """Nanoseconds left of the hold at ``now_ns`` (0: none; an ended one is cleared)."""
        if not self.until_ns:
            return 0
        self._seen_ns = now_ns
        left = self.until_ns - now_ns
        if left <= 0:
            self.until_ns = 0
            return 0
        return left

    def extend(self, now_ns: int, seconds: float) -> None:
        """Hold for ``seconds`` from ``now_ns``, unless it is held longer already."""
        self._seen_ns = now_ns
        self.until_ns = max(self.until_ns, now_ns + int(seconds * 1e9))

    def rebase(self, now_ns: int) -> None:
        """The clock is another one now (a new virtual loop): the hold keeps the time it
        had left when it was last read — at the last run's end (:meth:`Carry.end`)."""
        if self.until_ns:
            self.until_ns = now_ns + max(0, self.until_ns - self._seen_ns)
            self.left_ns(now_ns)


class _Kept:
    """One set of limits' rate gate and hold, and the limits they were made for."""

    __slots__ = ("hold", "limits", "rates")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.rates = limits.gate()
        self.hold = Hold()


class Carry:
    """A fleet's rate gates (its own and each replica's, by replica name) and its
    replicas' holds, kept across its runs. Limits that changed between runs (another
    ``Replica`` of that name, a new ``Fleet.limits``) start afresh."""

    __slots__ = ("_broker", "_clock", "_fleet", "_on_loop", "_replicas")

    def __init__(self) -> None:
        self._broker: tuple[Limits, _Bucket | None, _Bucket | None] | None = None
        self._fleet: _Kept | None = None
        self._replicas: dict[str, _Kept] = {}
        self._clock: object = None  # the clock of the last run's loop (clock_of)
        self._on_loop = False  # the fleet's clock read the last run's loop's

    def fleet(self, limits: Limits) -> RateGate | None:
        """The fleet's rate gate for ``limits``."""
        kept = self._fleet
        if kept is None or not _same_rates(kept.limits, limits):
            kept = self._fleet = _Kept(limits)
        return kept.rates

    def replica(self, name: str, limits: Limits) -> tuple[RateGate | None, Hold]:
        """The rate gate and hold of the replica ``name`` with ``limits``."""
        kept = self._replicas.get(name)
        if kept is None or not _same_rates(kept.limits, limits):
            old, kept = kept, _Kept(limits)
            if old is not None:  # a hold is the server's word, not its limits': it stays
                kept.hold = old.hold
            self._replicas[name] = kept
        return kept.rates, kept.hold

    def broker(self, limits: Limits) -> tuple[_Bucket | None, _Bucket | None]:
        """The request and token buckets the parent of ``Fleet(workers=N)`` leases to
        its workers, for ``limits``."""
        kept = self._broker
        if kept is None or not _same_rates(kept[0], limits):
            rpm, tpm, burst_s = limits.rpm, limits.tpm, limits.burst_s
            kept = self._broker = (
                limits,
                _bucket(rpm, burst_s, 1.0) if rpm is not None else None,
                _bucket(tpm, burst_s, 1.0) if tpm is not None else None,
            )
        return kept[1], kept[2]

    def begin(self, clock: Clock) -> None:
        """A run starts (on the running loop): each bucket drains for the time since the
        last run (none after a loop with a clock of its own); each hold goes on — unless
        ``clock`` (the fleet's) is the loop's own, and was the last run's loop's, and
        the two loops' clocks differ (a new virtual loop, which restarts near 0): then it
        keeps the time it had left."""
        loop = asyncio.get_running_loop()
        here, now = clock_of(loop), clock()
        on_loop = abs(now - loop.time() * 1e9) < _SAME_NS
        moved = self._clock is not None and here != self._clock
        rebase = moved and on_loop and self._on_loop
        self._clock, self._on_loop = here, on_loop
        for kept in (self._fleet, *self._replicas.values()):
            if kept is None:
                continue
            if kept.rates is not None:
                kept.rates.drain()
            if rebase and kept.hold.until_ns:
                kept.hold.rebase(now)

    def end(self, clock: Clock) -> None:
        """A run ends (on its loop): each hold notes the time it has left on ``clock``
        (the fleet's), which it keeps if the next run's clock is another one. It used to
        keep the time left at its last read — a hold read at 0 s of a run that ended at
        25 s kept all of its 30 s."""
        now = None
        for kept in (self._fleet, *self._replicas.values()):
            if kept is not None and kept.hold.until_ns:
                now = clock() if now is None else now
                kept.hold.left_ns(now)


def _same_rates(a: Limits, b: Limits) -> bool:
    """Whether two limits make the same buckets."""
    return (a.rpm, a.tpm, a.burst_s) == (b.rpm, b.tpm, b.burst_s)
