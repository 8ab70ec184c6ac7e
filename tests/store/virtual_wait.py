"""Virtual time for a thread that waits on a ``threading.Condition`` with a timeout
(``PostgresStore``'s watchdog): its clock reads :attr:`VirtualTime.now`, its timed waits
end when the test moves that clock past them (:meth:`VirtualTime.advance`), and the
move returns only once every thread whose wait it ended is waiting again — so whatever
that thread decided at the new time (to cut a connection, or not) is done. Nothing
depends on how fast the machine is.

Used by replacing a module's ``time`` and ``threading`` with :meth:`VirtualTime.time`
and :meth:`VirtualTime.threading`."""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace, TracebackType
from typing import Any

from ..wait import GUARD_S


class _Waiter:
    __slots__ = ("deadline", "notified")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.notified = False


class VirtualCondition:
    """``threading.Condition`` whose ``wait(timeout)`` counts in virtual time."""

    def __init__(self, clock: VirtualTime, lock: Any = None) -> None:
        self._clock = clock
        self._real = threading.Condition(lock)
        self._waiting: list[_Waiter] = []
        #: Calls to :meth:`wait` so far.
        self.entries = 0

    def __enter__(self) -> bool:
        return self._real.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._real.__exit__(kind, exc, tb)

    def wait(self, timeout: float | None = None) -> bool:
        me = _Waiter(math.inf if timeout is None else self._clock.now + timeout)
        self._waiting.append(me)
        self.entries += 1
        self._real.notify_all()  # (an advance may wait for this thread to be back)
        try:
            while not me.notified and self._clock.now < me.deadline:
                self._real.wait()
        finally:
            self._waiting.remove(me)
        return me.notified

    def notify(self, n: int = 1) -> None:
        for w in [w for w in self._waiting if not w.notified][:n]:
            w.notified = True
        self._real.notify_all()

    def notify_all(self) -> None:
        self.notify(len(self._waiting))

    def _advance(self, seconds: float) -> None:
        with self._real:
            self._clock.now += seconds
            ended = sum(
                1 for w in self._waiting if not w.notified and w.deadline <= self._clock.now
            )
            back = self.entries + ended
            self._real.notify_all()
            while self.entries < back:
                if not self._real.wait(GUARD_S):
                    raise AssertionError("a thread whose wait ended did not wait again")


class VirtualTime:
    """A clock moved by the test, for one :class:`VirtualCondition`."""

    def __init__(self) -> None:
        self.now = 0.0
        self._conditions: list[VirtualCondition] = []

    def monotonic(self) -> float:
        return self.now

    def condition(self, lock: Any = None) -> VirtualCondition:
        c = VirtualCondition(self, lock)
        self._conditions.append(c)
        return c

    def advance(self, seconds: float) -> None:
        """Move the clock; return once every thread whose wait that ended waits again."""
        (c,) = self._conditions
        c._advance(seconds)

    def time(self) -> Any:
        """A stand-in for the ``time`` module: ``monotonic`` only."""
        return SimpleNamespace(monotonic=self.monotonic)

    def threading(self) -> Any:
        """A stand-in for the ``threading`` module: real threads and locks, virtual
        conditions."""
        return SimpleNamespace(
            Thread=threading.Thread, Lock=threading.Lock, Condition=self.condition
        )
