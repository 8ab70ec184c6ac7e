"""SIGTERM and SIGPIPE for the ``agentflow`` commands.

SIGTERM is handled like Ctrl-C.

:func:`on_sigterm` (the handler ``agentflow.cli.main`` installs) raises
:class:`Terminated` — a :class:`KeyboardInterrupt` — wherever the program is, so every
``with`` block unwinds and stops the child process it started; the exit status is then
143. Within an event loop that is the wrong place to raise: the exception lands in
whichever task runs at that moment (a fleet's, a session's), which dies with it, leaves
the task that awaited it pending and prints "Task exception was never retrieved" or
"coroutine … was never awaited" on the way out. :func:`run_terminable` runs a coroutine
so that SIGTERM cancels its task instead, as :class:`asyncio.Runner` does for SIGINT:
the run unwinds in order and :class:`Terminated` is raised once it has.

A reader of standard output that goes away early (``agentflow plan | head -3``) is
Python's ``BrokenPipeError``, not the SIGPIPE death a C tool dies; :func:`stdout_gone`
tells one on standard output from another pipe's, and :func:`drop_stdout` ends the
command as that death would — quietly, status 141 (``128 + SIGPIPE``) — as
``agentflow.cli.main`` does for every command.
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
from typing import Any, TypeVar, cast

__all__ = ["Terminated", "drop_stdout", "on_sigterm", "run_terminable", "stdout_gone"]

T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises :class:`KeyboardInterrupt`, so that every
    ``with`` block unwinds and stops the child process it started."""


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler of the ``agentflow`` commands: raise :class:`Terminated`."""
    raise Terminated


def run_terminable(run: Callable[[Coroutine[Any, Any, T]], T], main: Coroutine[Any, Any, T]) -> T:
    """``run(main)`` (``asyncio.run``, ``run_virtual``), with SIGTERM cancelling ``main``'s
    task rather than raising where the loop happens to be.

    The first SIGTERM cancels the task (one before it starts: it does not start); once
    ``run`` has returned, :class:`Terminated` is raised — the run unwound in order, every
    ``finally`` and ``async with`` done. A second SIGTERM raises :class:`Terminated` at
    once (a run that does not stop when cancelled). The handler that was there is put
    back. Outside the main thread, where no signal arrives, this is ``run(main)``.

    Raises:
        Terminated: SIGTERM came during the run.
    """
    if threading.current_thread() is not threading.main_thread():
        return run(main)
    state = _Run()

    def on_term(signum: int, frame: FrameType | None) -> None:
        state.signals += 1
        if state.signals > 1:
            raise Terminated
        task, loop = state.task, state.loop
        if task is not None and loop is not None and not task.done():
            loop.call_soon_threadsafe(task.cancel)  # wakes the loop from its select

    async def cancellable() -> T | None:
        task = state.task = asyncio.current_task()
        state.loop = asyncio.get_running_loop()
        if state.stopped():  # before the run began
            main.close()
            return None
        try:
            return await main
        except asyncio.CancelledError:
            if state.stopped() and task is not None and task.uncancel() == 0:
                return None  # cancelled by SIGTERM alone: Terminated, below
            raise

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        result = run(cast(Coroutine[Any, Any, T], cancellable()))
    finally:
        signal.signal(signal.SIGTERM, previous)
    if state.stopped():
        raise Terminated
    return result


class _Run:
    """What :func:`run_terminable`'s handler needs: the signals so far, and the task to
    cancel on its loop once it runs."""

    def __init__(self) -> None:
        self.signals = 0
        self.task: asyncio.Task[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def stopped(self) -> bool:
        """Whether SIGTERM has come (read anew each time: a signal handler sets it)."""
        return self.signals > 0


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
    """End with standard output's reader gone: point standard output at ``os.devnull``
    (so what is still buffered, and the interpreter's own flush at exit, go nowhere
    instead of failing again) and return the status a SIGPIPE death has, 141."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return 128 + getattr(signal, "SIGPIPE", 13)  # (13 on POSIX; Windows has none)
