"""SIGTERM and SIGPIPE for the ``agentflow`` commands.

SIGTERM is handled like Ctrl-C, by one :class:`SigtermHandler` that ``agentflow.cli.main``
installs for every command, whatever it runs:

- Outside an event loop it raises :class:`Terminated` — a :class:`KeyboardInterrupt` —
  where the program is, so every ``with`` block unwinds and stops the child process it
  started; the exit status is then 143.
- Inside one that is the wrong place to raise: the exception would land in whichever task
  runs at that moment (a fleet's, a session's), which dies with it, leaves the task that
  awaited it pending and prints "Task exception was never retrieved" or "coroutine … was
  never awaited" on the way out. So there the handler cancels the task the loop runs to
  completion — the future ``loop.run_until_complete`` waits for: ``asyncio.run``'s,
  ``run_virtual``'s, any :class:`asyncio.Runner`'s main task — as :class:`asyncio.Runner`
  does for SIGINT. The run unwinds in order, every ``finally`` and ``async with`` done,
  and once that task has ended :class:`Terminated` is raised from the loop, out of
  ``asyncio.run`` (whose shutdown still runs). A command does nothing for this: no loop,
  whoever starts it, can miss it.
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
import inspect
import os
import select
import signal
import sys
from types import FrameType
from typing import Any

__all__ = [
    "STDOUT_GONE_STATUS",
    "SigtermHandler",
    "Terminated",
    "drop_stdout",
    "stdout_dropped",
    "stdout_gone",
]

#: The exit status once standard output's reader has gone: a SIGPIPE death's, ``128 + 13``.
STDOUT_GONE_STATUS = 128 + getattr(signal, "SIGPIPE", 13)  # (Windows has no SIGPIPE)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises :class:`KeyboardInterrupt`, so that every
    ``with`` block unwinds and stops the child process it started."""


class SigtermHandler:
    """The SIGTERM handler of the ``agentflow`` commands (one per command); see the module.

    Attributes:
        signals: the SIGTERMs it has had.
    """

    def __init__(self) -> None:
        self.signals = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        """Raise :class:`Terminated`, or, within an event loop, cancel its run.

        Raises:
            Terminated: outside an event loop, or at the second SIGTERM.
        """
        self.signals += 1
        try:
            loop = asyncio.get_running_loop()  # (a handler runs on the main thread's)
        except RuntimeError:
            raise Terminated from None
        if self.signals > 1:
            raise Terminated
        loop.call_soon_threadsafe(_cancel_run)  # on the loop, between its callbacks


#: ``run_until_complete``'s code: its frame on the stack holds the future the loop runs.
_RUN_UNTIL_COMPLETE = asyncio.BaseEventLoop.run_until_complete.__code__


def _cancel_run() -> None:
    """(A loop callback.) Cancel the future the running ``run_until_complete`` waits for;
    :func:`_terminate` once it is done. Without one (a loop written in C, such as uvloop's,
    has no frame to find it in) :class:`Terminated` is raised now: the loop stops, and
    :class:`asyncio.Runner` cancels what is left and waits for it."""
    run = _awaited(inspect.currentframe())
    if run is None:
        raise Terminated
    if run.done():
        _terminate(run)
        return
    run.cancel()
    run.add_done_callback(_terminate)


def _awaited(frame: FrameType | None) -> asyncio.Future[Any] | None:
    """The future of the innermost ``run_until_complete`` on ``frame``'s stack, if any."""
    while frame is not None:
        if frame.f_code is _RUN_UNTIL_COMPLETE:
            future = frame.f_locals.get("future")
            return future if asyncio.isfuture(future) else None
        frame = frame.f_back
    return None


def _terminate(run: asyncio.Future[Any]) -> None:
    """(A done callback of the cancelled run.) Raise :class:`Terminated` out of the loop —
    unless the run failed with an error of its own, which ``run_until_complete`` then
    raises as usual (the command reports it)."""
    if run.cancelled() or run.exception() is None:
        raise Terminated


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
