"""Sync tools run in daemon threads, so a stuck one cannot keep the process alive.

``asyncio.to_thread`` uses the loop's default ``ThreadPoolExecutor``, whose worker
threads are joined when the interpreter exits (``concurrent.futures`` registers the
join with ``threading._register_atexit``), and ``asyncio.run`` waits for them in
``shutdown_default_executor`` too. A sync tool that never returns would then hang the
process at exit even after its session was cancelled or timed out.

:data:`TOOL_THREADS` instead starts one daemon thread per call. Daemon threads are
never joined: at exit the interpreter simply stops them. Python cannot stop a thread
from outside, so a timed-out call's thread keeps running until its function returns
(or the process exits); its result is then dropped. A thread per call costs tens of
microseconds to start — nothing next to a tool call — and needs no pool that a few
stuck calls could exhaust.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["TOOL_THREADS", "DaemonThreadExecutor"]

T = TypeVar("T")


class DaemonThreadExecutor(concurrent.futures.Executor):
    """An executor that runs every submitted call in a new daemon thread.

    Use it with ``loop.run_in_executor``. :attr:`running` counts calls whose function
    has not returned yet — including calls whose caller gave up on them.
    """

    def __init__(self, name: str = "agentflow-tool") -> None:
        self._name = name
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._running = 0

    @property
    def running(self) -> int:
        """Calls still running in their thread now."""
        return self._running

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Start ``fn(*args, **kwargs)`` in a new daemon thread; its future."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                if not future.set_running_or_notify_cancel():
                    return
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to the awaiting side
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            finally:
                with self._lock:
                    self._running -= 1

        with self._lock:
            self._running += 1
        thread = threading.Thread(target=run, name=f"{self._name}-{next(self._ids)}", daemon=True)
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._running -= 1
            raise
        return future


#: The executor sync tools run in (``Tool(in_thread=True)``, the default).
TOOL_THREADS = DaemonThreadExecutor()
