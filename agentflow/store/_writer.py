"""The writer thread both stores run: records and calls in one queue, written in order.

:meth:`Store.write` puts a record on the queue; reads, lease changes and flushes put a
:class:`Call` there and await its answer. The thread wakes when ``batch_interval_s``
has passed since the first thing queued (or at once when ``max_batch`` records wait or
a call is queued), writes every record before a call in one transaction, then runs the
call — so a call sees everything written before it. :class:`BatchWriter` is that loop;
:class:`~agentflow.store.SQLiteStore` and :class:`~agentflow.store.PostgresStore` add
their connection, their transaction (``_commit``) and their error wording.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agentflow._errors import StoreError
from agentflow.store._records import Record

__all__ = ["STOP", "BatchWriter", "Call"]

C = TypeVar("C")
T = TypeVar("T")

#: What the closing call returns: the thread drains the queue and ends.
STOP = object()


class Call(Generic[C]):
    """Work for the writer thread that answers (a read, a lease change, a flush)."""

    __slots__ = ("fn", "future", "stop")

    def __init__(self, fn: Callable[[C], Any], *, stop: bool = False) -> None:
        self.fn = fn
        #: The closing call: it runs even when its caller stopped waiting.
        self.stop = stop
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


class BatchWriter(Generic[C]):
    """The queue and the loop of a store's writer thread (see the module).

    A subclass sets ``_where`` (how messages name the store), ``batch_interval_s`` and
    implements ``_commit(conn, records)`` (one transaction; on failure it sets
    ``_error``) and ``_as_store_error(exc)``.
    """

    _where: str
    batch_interval_s: float

    def _init_writer(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._urgent = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._lock = threading.Lock()

    def _commit(self, conn: C, records: list[Record]) -> None:
        raise NotImplementedError

    def _as_store_error(self, exc: BaseException) -> BaseException:
        raise NotImplementedError

    def _start(self) -> None:
        raise NotImplementedError

    async def _call(self, fn: Callable[[C], T]) -> T:
        self._start()
        call: Call[C] = Call(fn)
        with self._lock:  # not after a failed open has drained the queue (see _fail_all)
            if self._closed and isinstance(self._error, StoreError):
                raise self._error
            self._queue.put(call)
        self._urgent.set()
        result: T = await asyncio.wrap_future(call.future)
        return result

    def _loop(self, conn: C) -> None:
        q, urgent = self._queue, self._urgent
        while True:
            first = q.get()
            if not urgent.is_set():
                urgent.wait(self.batch_interval_s)
            urgent.clear()
            batch = [first]
            try:
                while True:
                    batch.append(q.get_nowait())
            except queue.Empty:
                pass
            if self._run_batch(conn, batch):
                return

    def _run_batch(self, conn: C, batch: list[Any]) -> bool:
        """Write ``batch`` in order: records in one transaction, each call after the
        records before it are committed. True once the stop call is reached."""
        records: list[Record] = []
        for item in batch:
            if not isinstance(item, Call):
                records.append(item)
                continue
            self._commit(conn, records)
            records = []
            # A caller that stopped waiting (cancelled) cancelled its future: its call is
            # skipped (no lease taken that nobody knows of), and never answered — setting
            # a cancelled future's result would raise and end this thread, and with it
            # every later flush.
            answer = item.future.set_running_or_notify_cancel()
            if not answer and not item.stop:
                continue
            try:
                value = item.fn(conn)
            except BaseException as exc:
                if answer:
                    item.future.set_exception(self._as_store_error(exc))
                continue
            if value is STOP:
                if answer:
                    item.future.set_result(None)
                self._drain_closed()
                return True
            item.future.set_result(value)
        self._commit(conn, records)
        return False

    def _fail_all(self, exc: BaseException) -> None:
        err = self._as_store_error(exc)
        with self._lock:
            self._error = err
            self._closed = True
            self._drain_closed(err)

    def _drain_closed(self, err: BaseException | None = None) -> None:
        try:
            while True:
                item = self._queue.get_nowait()
                if isinstance(item, Call) and item.future.set_running_or_notify_cancel():
                    item.future.set_exception(
                        err or StoreError(f"{self._where}: the store is closed")
                    )
        except queue.Empty:
            pass
