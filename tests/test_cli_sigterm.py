"""The ``agentflow`` commands' SIGTERM handler (``agentflow/_cli_signals.py``), in process.

A real SIGTERM is raised in this process (``signal.raise_signal``: the handler runs at
once, where the signal is raised — inside a task, the worst place). Within an event loop
the handler must not raise there: it cancels the run the loop runs to completion, which
unwinds in order, and :class:`Terminated` then comes out of ``asyncio.run`` (or
``run_virtual``) — with no "Task exception was never retrieved" on the way.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agentflow._cli_signals import SigtermHandler, Terminated
from agentflow.embedded import run_virtual

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

Runner = Callable[[Coroutine[Any, Any, Any]], Any]
RUNNERS = pytest.mark.parametrize("run", [asyncio.run, run_virtual], ids=["asyncio", "virtual"])


@contextmanager
def sigterm_handled() -> Iterator[SigtermHandler]:
    """The handler ``agentflow.cli.main`` installs, for the block."""
    handler = SigtermHandler()
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGTERM, previous)


class Unretrieved:
    """What the loop's exception handler was told (a task's exception never retrieved, …)."""

    def __init__(self) -> None:
        self.contexts: list[dict[str, Any]] = []

    def watch(self) -> None:
        """Catch the running loop's reports (its handler stays set once it is closed)."""
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: self.contexts.append(ctx))

    def messages(self) -> list[str]:
        gc.collect()  # a task never retrieved says so when it is collected
        return [str(c.get("message")) for c in self.contexts]


@RUNNERS
def test_sigterm_inside_a_child_task_cancels_the_run_in_order(run: Runner) -> None:
    """The signal comes while a child task runs: that task goes on to its next await,
    is cancelled there, its parent's cleanup runs after it, and Terminated comes out of
    the runner. (Raised where the signal came, it killed the child mid-step — "went on"
    never happened — left its parent pending and its exception never retrieved.)"""
    order: list[str] = []
    reports = Unretrieved()

    async def child() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            order.append("child went on")
            await asyncio.Event().wait()
        finally:
            order.append("child unwound")

    async def main() -> None:
        reports.watch()
        try:
            await asyncio.create_task(child())
        finally:
            order.append("main unwound")

    with sigterm_handled(), pytest.raises(Terminated):
        run(main())
    assert order == ["child went on", "child unwound", "main unwound"]
    assert reports.messages() == []


@RUNNERS
def test_sync_work_in_progress_is_finished_before_the_run_stops(run: Runner) -> None:
    """Work between two awaits is never cut in the middle: the cancel lands at the next
    await. A run that returned meanwhile still ends as terminated."""
    written: list[int] = []

    async def main() -> str:
        for i in range(5):
            if i == 2:
                signal.raise_signal(signal.SIGTERM)
            written.append(i)
        return "done"

    with sigterm_handled(), pytest.raises(Terminated):
        run(main())
    assert written == [0, 1, 2, 3, 4]


@RUNNERS
def test_an_error_of_the_run_s_own_while_it_unwinds_is_raised_not_hidden(run: Runner) -> None:
    async def main() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(3600)
        finally:
            raise OSError("the cleanup failed")

    with sigterm_handled(), pytest.raises(OSError, match="the cleanup failed"):
        run(main())


def test_a_second_sigterm_raises_at_once() -> None:
    """A run that does not stop when cancelled: the second SIGTERM raises where it comes."""
    seen: list[str] = []

    async def main() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            signal.raise_signal(signal.SIGTERM)
            seen.append("not reached")

    with sigterm_handled() as handler, pytest.raises(Terminated):
        asyncio.run(main())
    assert seen == ["cancelled"] and handler.signals == 2


def test_outside_an_event_loop_it_raises_at_once() -> None:
    with sigterm_handled(), pytest.raises(Terminated):
        signal.raise_signal(signal.SIGTERM)


def test_a_loop_run_without_run_until_complete_is_stopped() -> None:
    """No ``run_until_complete`` on the stack (``run_forever``; a loop written in C): the
    loop is stopped with Terminated, and what is left is cancelled by whoever closes it."""
    loop = asyncio.new_event_loop()
    order: list[str] = []

    async def main() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(3600)
        finally:
            order.append("unwound")

    try:
        task = loop.create_task(main())
        with sigterm_handled(), pytest.raises(Terminated):
            loop.run_forever()
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    finally:
        loop.close()
    assert order == ["unwound"]
