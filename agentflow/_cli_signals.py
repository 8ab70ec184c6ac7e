"""SIGTERM and SIGPIPE for the ``agentflow`` commands.

SIGTERM is handled like Ctrl-C, by one :class:`SigtermHandler` that ``agentflow.cli.main``
installs for every command, whatever it runs:

- Outside an event loop it raises :class:`Terminated` — a :class:`KeyboardInterrupt` —
  where the program is, so every ``with`` block unwinds and stops the child process it
  started; the exit status is then 143.
- Inside one that is the wrong place to raise: the exception would land in whichever task
  runs at that moment (a fleet's, a session's), which dies with it, leaves the task that
  awaited it pending and prints "Task exception was never retrieved" or "coroutine … was
  never awaited" on the way out. So every command runs its coroutine with
  :func:`run_command` (``asyncio.run``'s work, on the loop its ``loop_factory`` makes:
  asyncio's, :class:`~agentflow.embedded.VirtualTimeLoop`, uvloop's; ``run_bench`` and
  ``run_demo`` too, and without the handler it is just that), which makes the main task
  and registers it with the handler; a SIGTERM then cancels exactly that task
  (``loop.call_soon_threadsafe(task.cancel)``, between the loop's callbacks), as
  :class:`asyncio.Runner` does for SIGINT. The run unwinds in order, every ``finally`` and
  ``async with`` done, the runner shuts the loop down as usual, and :class:`Terminated` is
  then raised out of :func:`run_command` — unless the run failed with an error of its own
  while it unwound, which is raised instead (the command reports it). A SIGTERM that comes
  once the main task is done (while the runner cancels what is left, shuts down the async
  generators and the default executor) cuts nothing: it is remembered, and
  :class:`Terminated` is raised once the runner has returned. ``tests/test_cli_sigterm.py``
  checks that no command module starts a loop any other way.
- A loop not started by :func:`run_command` (none in the commands) is not known to the
  handler: there it raises :class:`Terminated` where it comes, as Ctrl-C's
  :class:`KeyboardInterrupt` does.
- A second SIGTERM raises :class:`Terminated` at once (a run that does not stop when
  cancelled).

A reader of standard output that goes away early (``agentflow plan | head -3``) is
Python's ``BrokenPipeError``, not the SIGPIPE death a C tool dies; :func:`stdout_gone`
tells one on standard output from another pipe's, and :func:`drop_stdout` ends the
command as that death would — quietly, status 141 (``128 + SIGPIPE``) — as
``agentflow.cli.main`` does for every command. A command that was asked to write files
(``bench --report``) drops standard output at once instead and goes on to write them
(``agentflow/_cli_console.py``): :func:`stdout_dropped` then tells ``agentflow.cli.main``
to end with 141 once it is done.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

__all__ = [
    "STDOUT_GONE_STATUS",
    "SigtermHandler",
    "Terminated",
    "drop_stdout",
    "run_command",
    "stdout_dropped",
    "stdout_gone",
]

T = TypeVar("T")

#: The exit status once standard output's reader has gone: a SIGPIPE death's, ``128 + 13``.
STDOUT_GONE_STATUS = 128 + getattr(signal, "SIGPIPE", 13)  # (Windows has no SIGPIPE)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises :class:`KeyboardInterrupt`, so that every
    ``with`` block unwinds and stops the child process it started."""


def run_command(
    main: Coroutine[Any, Any, T],
    *,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Run a command's coroutine to completion on a new event loop and close the loop, as
    ``asyncio.run`` does (``loop_factory``: as :class:`asyncio.Runner`'s — pass
    :class:`~agentflow.embedded.VirtualTimeLoop` for ``run_virtual``'s run).

    Under the commands' :class:`SigtermHandler` (on the main thread), SIGTERM cancels the
    run's main task; see the module.

    Raises:
        Terminated: SIGTERM came during the run (after its shutdown, which still ran), and
            the run did not fail with an error of its own.
    """
    handler = signal.getsignal(signal.SIGTERM)
    if (
        isinstance(handler, SigtermHandler)
        and threading.current_thread() is threading.main_thread()
    ):
        return handler.run(main, loop_factory=loop_factory)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main)


class _Run:
    """One :func:`run_command` run, as its :class:`SigtermHandler` knows it."""

    __slots__ = ("loop", "task", "terminated")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # once the runner made it
        self.task: asyncio.Task[Any] | None = None  # the main task, once it runs
        self.terminated = False  # a SIGTERM came

    async def main(self, main: Coroutine[Any, Any, T]) -> T:
        """The main task's coroutine: ``main``, with the task known to the handler."""
        self.task = asyncio.current_task()
        if self.terminated and self.task is not None:  # came before it started
            self.task.cancel()
        return await main

    def cancel(self) -> None:
        """(A loop callback.) Cancel the main task, unless it is done by now (the signal
        came as it ended: the shutdown is left alone) or not started yet (:meth:`main`
        cancels it as it starts)."""
        if self.task is not None and not self.task.done():
            self.task.cancel()


class SigtermHandler:
    """The SIGTERM handler of the ``agentflow`` commands (one per command); see the module.

    Attributes:
        signals: the SIGTERMs it has had.
    """

    def __init__(self) -> None:
        self.signals = 0
        self._run: _Run | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        """Raise :class:`Terminated`, or, within a :func:`run_command` run, cancel its main
        task (or, once that has ended, note the signal for :meth:`run` to raise).

        Raises:
            Terminated: outside a :func:`run_command` run, or at the second SIGTERM.
        """
        self.signals += 1
        run = self._run
        if run is None or self.signals > 1:
            raise Terminated
        run.terminated = True
        loop, task = run.loop, run.task
        if loop is not None and not loop.is_closed() and (task is None or not task.done()):
            loop.call_soon_threadsafe(run.cancel)  # on the loop, between its callbacks

    def run(
        self,
        main: Coroutine[Any, Any, T],
        *,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> T:
        """:func:`run_command`'s run, registered with this handler until the runner has
        shut its loop down."""
        run = _Run()
        outer, self._run = self._run, run
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                run.loop = runner.get_loop()
                try:
                    result = runner.run(run.main(main))
                except asyncio.CancelledError:
                    if not run.terminated:
                        raise
        finally:
            self._run = outer
        if run.terminated:  # (or came during the shutdown: raised now, after it)
            raise Terminated
        return result


def stdout_gone() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone: writing to it
    is what raised ``BrokenPipeError``, not a child's pipe or a connection."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a non-file (tests)
        return False
    if not hasattr(select, "poll"):  # (Windows) nothing to ask: the error said so
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in poller.poll(0))


def drop_stdout() -> int:
    """Standard output's reader has gone: point standard output at ``os.devnull`` (so
    what is still buffered, what is printed from now on and the interpreter's own flush
    at exit go nowhere instead of failing again) and return the status a SIGPIPE death
    has, 141, for the command to end with — now, or once it has written its files
    (:func:`stdout_dropped` says it happened)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    _dropped.append(True)
    return STDOUT_GONE_STATUS


def stdout_dropped() -> bool:
    """Whether :func:`drop_stdout` has pointed this process's standard output at
    ``os.devnull`` (its reader went away): the command ends with 141 when it is done."""
    return bool(_dropped)


#: Not empty once standard output is dropped (a process has one standard output).
_dropped: list[bool] = []
