"""Stopping a demo run with SIGINT (Ctrl-C) or SIGTERM, and still reporting it.

While the fleet runs, :class:`Stopper` handles both signals on the event loop
(``loop.add_signal_handler``). The first one cancels the fleet: every session records
the turns it finished (``status="cancelled"`` for those cut short) and
:func:`run_stoppable` returns a :class:`FleetResult` of all of them, so the demo writes
its report, marked interrupted, as usual. A signal that comes after the fleet ended
(while the simulator child is stopped, or the report built and written) cuts nothing
short: the report of the whole run is still written, and the demo then exits as a
stopped one (:attr:`Stopper.after_run`); once the report file is in place, a signal
changes nothing (``demo/run.py``). ``agentflow bench`` defers signals the same way
while it writes its files after a run (:meth:`Stopper.defer`). A second signal means
"now": the children this process started are killed and it exits at once with
``128 + signal`` (130 for SIGINT, 143 for SIGTERM), writing nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import Any, ClassVar

from agentflow._events import Event
from agentflow._fleet import Fleet, FleetResult, ReplicaStats
from agentflow._process import kill_children
from agentflow._session import Session, SessionResult
from agentflow.typing import Clock

__all__ = ["Stopper", "run_stoppable"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopper:
    """Turns the first SIGINT/SIGTERM during a run into a cancelled run; see the module.

    Use :meth:`guarding` around everything from the run to the report, and
    :meth:`armed` around the fleet's run itself.

    Attributes:
        signal: the signal that stopped the run, once one has.
        after_run: whether it came after the fleet had ended (nothing was cut short).
    """

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self.after_run = False
        self._main = threading.current_thread() is threading.main_thread()

    @contextlib.contextmanager
    def guarding(self) -> Iterator[None]:
        """Within the block, once a signal has stopped the run, another one exits at once
        (while the report is written, the child stopped, …). The handlers that were
        there are restored when it ends."""
        saved = {sig: signal.getsignal(sig) for sig in _SIGNALS} if self._main else {}
        try:
            yield
        finally:
            for sig, handler in saved.items():
                if handler is not None:
                    signal.signal(sig, handler)

    @contextlib.contextmanager
    def armed(self, task: asyncio.Future[Any], on_stop: Callable[[], None]) -> Iterator[None]:
        """Within the block, the first signal calls ``on_stop`` and cancels ``task``;
        after it (within :meth:`guarding`), the first signal is only noted
        (:attr:`after_run`) and the next one exits at once.

        Outside the main thread (where asyncio cannot take signals) and on loops without
        signal handlers, it does nothing.
        """
        loop = asyncio.get_running_loop()
        taken: list[signal.Signals] = []
        if self._main:
            for sig in _SIGNALS:
                try:
                    loop.add_signal_handler(sig, self._fire, sig, task, on_stop)
                except (NotImplementedError, RuntimeError, ValueError):
                    break
                taken.append(sig)
        try:
            yield
        finally:
            for sig in taken:  # until guarding() puts the process's own back
                loop.remove_signal_handler(sig)  # (which resets it to the default)
                signal.signal(sig, self._force if self.signal is not None else self._late)

    def defer(self) -> None:
        """From now until :meth:`guarding` ends, treat signals as :meth:`armed` does once
        its run has ended: the first is only noted (:attr:`after_run`), the next exits at
        once. For what a command does after a run that is not :meth:`armed` (``agentflow
        bench`` writing its files once ``run_bench`` returned). Outside the main thread it
        does nothing."""
        if self._main:
            for sig in _SIGNALS:
                signal.signal(sig, self._late)

    def _fire(
        self, sig: signal.Signals, task: asyncio.Future[Any], on_stop: Callable[[], None]
    ) -> None:
        if self.signal is not None:
            self._force(sig, None)
        self.signal = sig
        on_stop()
        task.cancel()

    def _late(self, signum: int, frame: FrameType | None) -> None:
        """The first signal after the fleet ended: the report of the whole run is still
        written; the demo exits as stopped once it is."""
        if self.signal is not None:
            self._force(signum, frame)
        self.signal, self.after_run = signal.Signals(signum), True
        name = self.signal.name
        note = f"\n{name}: the run had ended; finishing its report ({name} again: exit now)\n"
        os.write(2, note.encode())

    def _force(self, signum: int, frame: FrameType | None) -> None:
        """The second signal: kill the children and exit, no report, no waiting.

        The live view (rich) hid the terminal's cursor and would show it again as it
        stopped, which ``os._exit`` skips: on a terminal it is shown here, or the shell
        was left without one."""
        kill_children()
        name = signal.Signals(signum).name
        show_cursor()
        os.write(2, f"\n{name} again: exiting without a report\n".encode())
        os._exit(128 + signum)


def show_cursor() -> None:
    """Show the terminal's cursor (``ESC [ ? 25 h``), when standard output is one."""
    with contextlib.suppress(OSError):
        if os.isatty(1):
            os.write(1, b"\x1b[?25h")


class _RetryCount:
    """Counts the fleet's retries from its events (a stopped run returns no count)."""

    event_types: ClassVar[frozenset[str]] = frozenset({"retry"})

    def __init__(self) -> None:
        self.retries = 0

    def __call__(self, event: Event) -> None:
        if event.type == "retry":
            self.retries += 1


async def run_stoppable(
    fleet: Fleet,
    sessions: list[Session],
    stopper: Stopper,
    clock: Clock,
    begin: Callable[[], Awaitable[FleetResult]] | None = None,
) -> FleetResult:
    """``fleet.run(sessions)``; if ``stopper`` stops it, the result of what ran.

    In a stopped run's result every session is there: those that ended with their
    status, the others ``cancelled`` with the turns they finished (none, for a session
    that never started); ``callback_errors`` is empty (the fleet's bus is gone).
    ``begin``, when given, is run instead of ``fleet.run(sessions)`` (a recorded run or
    a resumption; the caller then reads a stopped run's result from its store).
    """
    retries = _RetryCount()
    fleet.subscribe(retries)
    live: dict[str, Any] = {}

    def snapshot() -> None:
        # The run's scheduler, which the fleet drops when the run ends: read it first.
        scheduler = fleet._scheduler  # private: the demo reads the live run's figures
        if scheduler is not None:
            live["peak"] = scheduler.peak_in_flight
            live["replicas"] = [ReplicaStats.of(r) for r in scheduler.replicas]

    start = clock()
    task = asyncio.ensure_future(begin() if begin is not None else fleet.run(sessions))
    with stopper.armed(task, snapshot):
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if stopper.signal is None or (me is not None and me.cancelling()):
                raise  # cancelled from outside, not by a signal
    return FleetResult(
        sessions=[s.result or _never_started(s) for s in sessions],
        wall_s=(clock() - start) / 1e9,
        peak_in_flight=int(live.get("peak", 0)),
        retries=retries.retries,
        replicas=list(live.get("replicas", [])),
    )


def _never_started(s: Session) -> SessionResult:
    return SessionResult(
        session_id=s.session_id,
        agent=s.agent.name,
        status="cancelled",
        final_output=None,
        messages=s.messages,
        turns=list(s.turns),
        error=asyncio.CancelledError(),
        metadata=s.metadata,
    )
