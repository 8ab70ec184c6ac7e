"""Sync tools run in daemon threads, so a stuck one cannot keep the process alive.

``asyncio.to_thread`` uses the loop's default ``ThreadPoolExecutor``, whose worker
threads are joined when the interpreter exits (``concurrent.futures`` registers the
join with ``threading._register_atexit``), and ``asyncio.run`` waits for them in
``shutdown_default_executor`` too. A sync tool that never returns would then hang the
process at exit even after its session was cancelled or timed out.

:data:`TOOL_THREADS` is a small pool of daemon threads instead. Daemon threads are
never joined: at exit the interpreter simply stops them. Python cannot stop a thread
from outside, so a timed-out call's thread keeps running until its function returns
(or the process exits), and its result is then dropped. The pool never waits for a
busy thread: when no idle one is free it starts another, so a few stuck calls cannot
starve the rest; idle threads end after ``idle_s``. (A fresh thread per call would be
simpler, but with a trivial function it cost 80–550 µs a call on the shared 2-core
test machine, against 35–90 µs for this pool and for asyncio's default one.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["TOOL_THREADS", "DaemonThreadExecutor", "thread_result"]

T = TypeVar("T")

_Work = tuple["concurrent.futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadExecutor(concurrent.futures.Executor):
    """A pool of daemon threads that grows whenever no thread is idle.

    Use it with ``loop.run_in_executor``.

    Args:
        name: thread names are ``{name}-1``, ``{name}-2``, ...
        idle_s: an idle thread ends after this many seconds without work.

    Attributes:
        running: calls whose function has not returned yet (including calls whose
            caller gave up on them).
        threads: threads alive in the pool now.
    """

    def __init__(self, name: str = "agentflow-tool", *, idle_s: float = 60.0) -> None:
        self._name = name
        self._idle_s = idle_s
        self._ids = itertools.count(1)
        self._queue: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        # One unit per idle thread not yet promised to a submitted call.
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self.running = 0
        self.threads = 0

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Run ``fn(*args, **kwargs)`` in an idle daemon thread, or a new one; its future."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self.running += 1
        self._queue.put((future, fn, args, kwargs))
        if not self._idle.acquire(blocking=False):
            with self._lock:
                self.threads += 1
            name = f"{self._name}-{next(self._ids)}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, fn, args, kwargs = self._queue.get(timeout=self._idle_s)
            except queue.Empty:
                # Leave only if an idle unit is unclaimed; a claimed one means a call is
                # on its way to this queue and needs a thread.
                if self._idle.acquire(blocking=False):
                    with self._lock:
                        self.threads -= 1
                    return
                continue
            ok, result, error = False, None, None
            if future.set_running_or_notify_cancel():
                try:
                    result, ok = fn(*args, **kwargs), True
                except BaseException as exc:  # handed to the awaiting side
                    error = exc
            # Idle again before the caller hears back: its next call finds this thread.
            with self._lock:
                self.running -= 1
            self._idle.release()
            if ok:
                future.set_result(result)
            elif error is not None:
                future.set_exception(error)
            del future, fn, args, kwargs, result, error


#: The executor sync tools run in (``Tool(in_thread=True)``, the default).
TOOL_THREADS = DaemonThreadExecutor()


def thread_result(future: concurrent.futures.Future[T]) -> asyncio.Future[T]:
    """``asyncio.wrap_future(future)`` on the running loop, for a thread's answer awaited
    without ``run_in_executor`` (a store's writer thread): a loop that counts thread work
    (:meth:`~agentflow.embedded.VirtualTimeLoop.thread_work`) counts it, so virtual time
    does not jump from timer to timer while the thread works, as it would for an await on
    nothing the loop can see."""
    loop = asyncio.get_running_loop()
    wrapped = asyncio.wrap_future(future, loop=loop)
    count: Callable[[asyncio.Future[Any]], None] | None = getattr(loop, "thread_work", None)
    if count is not None:
        count(wrapped)
    return wrapped
