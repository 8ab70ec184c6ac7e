"""Waiting on a condition in tests, never on the clock.

A test that sleeps for a fixed time and then checks races the machine it runs on: on a
loaded CI machine the sleep ends before the thing it waited for. :func:`eventually` polls
a condition instead, with a deadline far beyond any expected delay; it is a hang guard
that turns "never happened" into a failure, not a timing assertion.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import IO, AnyStr

#: How long a condition may take before the test fails (seconds). Generous on purpose.
GUARD_S = 60.0


async def eventually(
    condition: Callable[[], object], what: str, *, guard_s: float = GUARD_S, poll_s: float = 0.005
) -> None:
    """Return as soon as ``condition()`` is true; fail naming ``what`` after ``guard_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {guard_s:g} s waiting for {what}")
        await asyncio.sleep(poll_s)


def wait_for(condition: Callable[[], bool], what: str, guard_s: float = GUARD_S) -> None:
    """Blocking :func:`eventually`, for tests that watch other processes."""
    deadline = time.monotonic() + guard_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {guard_s:g} s waiting for {what}")
        time.sleep(0.05)


def read_line(stream: IO[AnyStr], what: str, guard_s: float = GUARD_S) -> AnyStr:
    """``stream.readline()`` from another process's pipe, failing naming ``what`` after
    ``guard_s`` instead of hanging when the process never writes its line.

    The read runs in a daemon thread; the test's cleanup (killing the process) ends it.
    """
    box: queue.Queue[AnyStr] = queue.Queue(1)
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    try:
        return box.get(timeout=guard_s)
    except queue.Empty:
        raise AssertionError(f"gave up after {guard_s:g} s waiting for {what}") from None
