"""Virtual time for asyncio: a whole fleet run simulated faster than real time.

:class:`VirtualTimeLoop` is an ordinary selector event loop whose ``time()`` is a
counter. When nothing is ready to run, instead of blocking in ``select`` until the
next timer is due, it polls for I/O without waiting and jumps the counter to that
timer. Everything written against asyncio — ``asyncio.sleep``, ``asyncio.timeout``,
``loop.call_later``, agentflow's own scheduler and timeouts — then runs unchanged,
and minutes of simulated rack time take as long as the Python work they contain.

Real I/O still works (the loop polls it), but takes no virtual time — and a peer in
another process (a server, a subprocess) is not waited for: while it works on its answer
the clock jumps to the next timer, so a time limit fires at once. Keep every peer in the
loop (``SimTransport``, ``ScriptedServer``) or in a thread. Work in a thread
(``asyncio.to_thread``, ``loop.run_in_executor``, agentflow's sync tools, a store's
reads and lease changes on its writer thread) takes zero virtual time too, but while
any such call runs the clock never runs ahead of real time: the loop waits for the
thread, for real, up to the next timer's delay, and jumps only if the thread is still
busy then. So a timer — a tool's time limit, say — does not fire just because a thread
had not finished yet, and a stuck thread still meets its limit. The loop blocks for real
also when nothing at all is scheduled. For deterministic runs keep the simulated world
on timers: tools that "take" time should ``await asyncio.sleep(...)``.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple

__all__ = ["VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class _JumpingSelector(selectors.DefaultSelector):
    """Never waits while a timer is pending: it tells the loop to jump instead."""

    def __init__(self, jump: Callable[[float], None], busy: Callable[[], bool]) -> None:
        super().__init__()
        self._jump = jump
        self._busy = busy

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready:
            return ready
        if timeout is None:
            return super().select(None)  # nothing scheduled: only I/O or a thread can wake us
        if timeout > 0:
            if self._busy():  # a thread runs: give it up to `timeout` of real time first
                ready = super().select(timeout)
                if ready:
                    return ready
            self._jump(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on a virtual clock that starts at ``start`` seconds."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._threads = 0
        super().__init__(_JumpingSelector(self._advance, lambda: self._threads > 0))

    def time(self) -> float:
        """The virtual time, in seconds."""
        return self._now

    def _advance(self, dt: float) -> None:
        self._now += dt

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        """As the base loop's; while the call runs, the clock does not run ahead of real time."""
        future = super().run_in_executor(executor, func, *args)
        self.thread_work(future)
        return future

    def thread_work(self, future: asyncio.Future[Any]) -> None:
        """Count ``future`` as work in a thread until it is done, as :meth:`run_in_executor`
        counts its calls: a thread's answer awaited some other way (a store's writer
        thread, through ``agentflow._threads.thread_result``) then keeps the clock from
        jumping to the next timer while the thread works."""
        self._threads += 1
        future.add_done_callback(self._thread_done)

    def _thread_done(self, _: asyncio.Future[Any]) -> None:
        self._threads -= 1

    def clock_ns(self) -> int:
        """The virtual time in integer nanoseconds — pass it as agentflow's ``clock``."""
        return int(self._now * 1e9)


def run_virtual(main: Coroutine[Any, Any, T] | Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualTimeLoop`, then close it as
    ``asyncio.run`` does: tasks still pending are cancelled (their ``finally`` runs),
    async generators and the default executor are shut down."""

    async def called() -> T:
        return await main()  # type: ignore[operator]

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main if asyncio.iscoroutine(main) else called())
