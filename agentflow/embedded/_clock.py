"""Virtual time for asyncio: a whole fleet run simulated faster than real time.

:class:`VirtualTimeLoop` is an ordinary selector event loop whose ``time()`` is a
counter. When nothing is ready to run, instead of blocking in ``select`` until the
next timer is due, it polls for I/O without waiting and jumps the counter to that
timer. Everything written against asyncio — ``asyncio.sleep``, ``asyncio.timeout``,
``loop.call_later``, agentflow's own scheduler and timeouts — then runs unchanged,
and minutes of simulated rack time take as long as the Python work they contain.

Real I/O still works (the loop polls it), but takes no virtual time; a worker thread
(``asyncio.to_thread``) takes zero virtual time too, and the loop blocks for real only
when nothing at all is scheduled. For deterministic runs keep the simulated world
on timers: tools that "take" time should ``await asyncio.sleep(...)``.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Never waits while a timer is pending: it tells the loop to jump instead."""

    def __init__(self, jump: Callable[[float], None]) -> None:
        super().__init__()
        self._jump = jump

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready:
            return ready
        if timeout is None:
            return super().select(None)  # nothing scheduled: only I/O or a thread can wake us
        if timeout > 0:
            self._jump(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on a virtual clock that starts at ``start`` seconds."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        super().__init__(_JumpingSelector(self._advance))

    def time(self) -> float:
        """The virtual time, in seconds."""
        return self._now

    def _advance(self, dt: float) -> None:
        self._now += dt

    def clock_ns(self) -> int:
        """The virtual time in integer nanoseconds — pass it as agentflow's ``clock``."""
        return int(self._now * 1e9)


def run_virtual(main: Coroutine[Any, Any, T] | Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualTimeLoop`, then close the loop."""
    loop = VirtualTimeLoop()
    try:
        coro = main if asyncio.iscoroutine(main) else main()
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
