"""The writer thread both stores run: batches and calls in one queue, written in order.

On an event loop, :meth:`Store.write` appends a record to a list (no lock wait, no
wakeup); the first record of a batch arms one timer on the loop, and when
``batch_interval_s`` has passed (or ``max_batch`` records wait) the loop hands the whole
list to the writer thread with one queue put. So the thread wakes once per batch,
on a batch that is complete, and commits it at once — not once per record and again
when its own timer runs out (that cost ~200 µs of CPU per batch here, more than the
commit's inserts; ``docs/store-cost.md``). A record written outside a running loop (a
plain thread) is queued alone, and the thread gathers what follows for
``batch_interval_s`` as before.

Reads, lease changes and flushes hand over the loop's batch first, then put a
:class:`Call` on the queue and await its answer: the thread writes every record before
a call in one transaction, then runs the call — so a call sees everything written
before it (but an unordered one: :attr:`Call.unordered`). :class:`BatchWriter` is that
loop; :class:`~agentflow.store.SQLiteStore` and :class:`~agentflow.store.PostgresStore`
add their connection, their transaction (``_commit``) and their error wording.

What a ``kill -9`` loses is unchanged: the records of the batch not yet committed —
at most ``batch_interval_s`` of them, whether they wait in the loop's list or in the
queue. A loop that is blocked cannot run its timer, so the thread also takes the loop's
batch itself when it has been handed nothing for :data:`STALL_S` (a blocked loop delays
its records by at most that; an idle store wakes the thread once per ``STALL_S``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

from agentflow._errors import StoreError
from agentflow._logging import get_logger
from agentflow._threads import thread_result
from agentflow.store._closing import wait_through_cancel
from agentflow.store._records import Record
from agentflow.store._writer_errors import WriterErrors

__all__ = ["STOP", "Batch", "BatchWriter", "Call", "Item"]

_log = get_logger("agentflow.store")

C = TypeVar("C")
T = TypeVar("T")

#: What the closing call returns: the thread drains the queue and ends.
STOP = object()

#: Seconds after which the writer takes a loop's batch itself (when the loop is blocked
#: and its timer cannot hand it over); ``batch_interval_s`` if that is longer.
STALL_S = 1.0


#: What the writer thread commits: a :data:`Record`, or what a store made of one as it
#: was written (``SQLiteStore`` with its journal: a turn's or tool result's row).
Item = Any


class Batch(list[Item]):
    """Items handed to the writer thread together, and — with a journal
    (``store/_journal.py``) — where the journal stood after the last of them."""

    __slots__ = ("mark",)

    def __init__(self, records: list[Item], mark: tuple[int, int] | None = None) -> None:
        super().__init__(records)
        self.mark = mark


class Call(Generic[C]):
    """Work for the writer thread that answers (a read, a lease change, a flush)."""

    __slots__ = ("fn", "future", "stop", "unordered")

    def __init__(
        self, fn: Callable[[C], Any], *, stop: bool = False, unordered: bool = False
    ) -> None:
        self.fn = fn
        #: The closing call: it runs even when its caller stopped waiting.
        self.stop = stop
        #: Needs nothing written before it (a lease renewal): run before the records ahead
        #: of it are committed; a batch of such calls alone tries no commit (nor a held one).
        self.unordered = unordered
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


class BatchWriter(WriterErrors, Generic[C]):
    """The queue and the loop of a store's writer thread (see the module).

    A subclass sets ``_where`` (how messages name the store), ``batch_interval_s`` and
    implements ``_commit(conn, records, mark)`` (one transaction; on failure it sets
    ``_error``; ``mark`` is the last batch's :attr:`Batch.mark`) and
    ``_as_store_error(exc)``. It may change how the thread waits when nothing is handed
    over (:meth:`_idle_wait_s`, :meth:`_take_idle`).
    """

    _where: str
    batch_interval_s: float
    max_batch: int

    def _init_writer(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._urgent = threading.Event()
        self._thread: threading.Thread | None = None
        #: Set by the writer thread as it ends, once it has let go of its connection
        #: (and the journal): a closed store's files are then another opener's.
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._init_errors()
        self._closed = False
        self._lock = threading.Lock()
        # The batch being gathered on an event loop, and that loop (see _enqueue).
        self._batch: list[Item] = []
        self._batch_loop: asyncio.AbstractEventLoop | None = None
        self._batch_started = 0.0  # time.monotonic() of the batch's first record
        #: Where the store's journal stands after the last record written (a store with
        #: a journal sets it, under ``_batch_lock``); it goes with each batch handed over.
        self._mark: tuple[int, int] | None = None
        self._batch_lock = threading.Lock()
        self._pid = os.getpid()
        _writers.add(self)

    def _enqueue(self, record: Record) -> None:
        """Add ``record`` to the batch of the running loop (or, outside one, queue it)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            q = self._queue
            # Under the lock a failed first connection's drain takes while it puts the
            # queued records back (PostgresStore): not put between, ahead of them.
            with self._lock:
                BatchWriter._hand_over(self)  # what a loop gathered goes first
                q.put(record)
            if q.qsize() >= self.max_batch:
                self._urgent.set()
            return
        with self._batch_lock:
            batch = self._batch
            arm = not batch or self._batch_loop is not loop
            if not arm:
                batch.append(record)
            elif not batch:
                batch = self._batch = [record]
                self._batch_loop = loop
                self._batch_started = time.monotonic()
            else:  # gathered on another loop: it goes first (below)
                batch = []
            full = len(batch) >= self.max_batch
        if full:
            self._hand_over()  # a timer armed for it later finds nothing, or hands over early
        elif arm:
            if not batch:  # handed over as its loop's timer would (PostgresStore: under
                self._hand_over()  # _lock, as above); then this record starts a batch
                self._enqueue(record)
            elif self.batch_interval_s > 0:
                loop.call_later(self.batch_interval_s, self._hand_over)
            else:
                loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        """Give the writer thread the batch gathered so far (one queue put), if any."""
        with self._batch_lock:
            batch = self._batch
            if not batch:
                return
            self._batch = []
            self._batch_loop = None
            self._queue.put(Batch(batch, self._mark))

    def _put_stop(self, stop: Call[C]) -> None:
        """Queue the closing call after everything written so far."""
        with self._lock:  # a call checks this under the lock: none is queued after stop
            self._closed = True
        self._hand_over()
        self._queue.put(stop)
        self._urgent.set()

    async def open(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def write(self, record: Record) -> None:
        """Add ``record`` to the next batch (on an event loop: one list append; see the
        module)."""
        if self._closed:
            raise self._failed or StoreError(
                f"{self._where}: write to a closed store ({type(record).__name__})"
            )
        if self._thread is None:
            self._start_for_write()
        self._enqueue(record)

    async def flush(self) -> None:
        """Return once every record written before the call is committed.

        Raises:
            StoreError: an earlier batch failed to commit (until one succeeds), or —
                :class:`RecordsLeftOut` — records were left out since the last flush
                that said so (each loss is reported once).
        """
        await self._call(lambda conn: None)
        self._report()

    def _commit(self, conn: C, records: list[Item], mark: tuple[int, int] | None) -> None:
        raise NotImplementedError

    def _as_store_error(self, exc: BaseException) -> BaseException:
        raise NotImplementedError

    def _start(self) -> None:
        raise NotImplementedError

    def _start_for_write(self) -> None:
        """A write finding no writer thread: start it (a store may wait for the next
        call instead)."""
        self._start()

    async def _call(self, fn: Callable[[C], T], *, unordered: bool = False) -> T:
        self._start()
        call: Call[C] = Call(fn, unordered=unordered)
        self._hand_over()
        with self._lock:  # not after the stop call, or a failed open's drain (_fail_all)
            if self._closed:
                raise self._closed_error()
            self._queue.put(call)
        self._urgent.set()
        result: T = await thread_result(call.future)
        return result

    def _thread_ended(self) -> None:
        """Writer thread, as it ends: say so (:attr:`_ended`)."""
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            self._ended.set_result(None)

    async def _wait_failed_writer(self, timeout_s: float) -> None:
        """Closing a store whose writer failed on its own: wait (at most ``timeout_s``)
        for its thread to let go of the connection and the journal, as a clean close
        does. (It returned at once: a store opened next on the same file could find the
        journal still held, take it for a live writer's, and leave its records out.)"""
        if self._thread is not None and not self._ended.done():
            with contextlib.suppress(TimeoutError):
                await wait_through_cancel(thread_result(self._ended), timeout_s)

    def _usable(self, conn: C) -> C:
        """The connection to run the next commit or call on: ``conn``. A store whose
        connection can be lost (a server's) returns a new one once it is."""
        return conn

    def _idle_wait_s(self) -> float:
        """How long the thread waits for a hand-over before :meth:`_take_idle`."""
        return max(STALL_S, self.batch_interval_s)

    def _take_idle(self) -> list[Item] | None:
        """What the thread takes itself when nothing was handed over for
        :meth:`_idle_wait_s`: the loop's batch once it is that old (a blocked loop cannot
        run the timer that hands it over; a younger one that timer hands over). Nothing
        while something was handed over since the wait ran out (checked under the lock
        every hand-over takes): that goes first, so records are committed in order."""
        with self._batch_lock:
            batch = self._batch
            if (
                not batch
                or not self._queue.empty()
                or time.monotonic() - self._batch_started < self._idle_wait_s()
            ):
                return None
            self._batch = []
            self._batch_loop = None
            return batch

    def _loop(self, conn: C) -> None:
        """The writer thread's loop until the closing call. Should it fail on its own (a
        bug, not a record's or the database's error, which ``_commit`` keeps), every call
        waiting now or later gets a :class:`StoreError` saying so — none waits forever on
        a thread that is gone."""
        batch: list[Any] = []  # the one being run (its calls are out of the queue)
        try:
            self._serve(conn, batch)
        except Exception as exc:  # said to every call, and logged; the thread ends
            _log.error("store.writer_failed", store=self._where, error=repr(exc), exc_info=exc)
            err = (
                exc
                if isinstance(exc, StoreError)
                else StoreError(f"{self._where}: the store's writer thread failed: {exc!r}")
            )
            self._fail_all(err)
            for item in batch:
                if isinstance(item, Call) and not item.future.done():
                    with contextlib.suppress(concurrent.futures.InvalidStateError):
                        item.future.set_exception(err)

    def _serve(self, conn: C, batch: list[Any]) -> None:
        """Run batches until the closing call; ``batch`` is the one being run."""
        q, urgent = self._queue, self._urgent
        while True:
            try:
                first = q.get(timeout=self._idle_wait_s())
            except queue.Empty:
                first = self._take_idle()
                if first is None:
                    continue
            if not isinstance(first, list):  # a record from a plain thread, or a call
                if not urgent.is_set():
                    urgent.wait(self.batch_interval_s)
                urgent.clear()
            batch[:] = [first]
            try:
                while True:
                    batch.append(q.get_nowait())
            except queue.Empty:
                pass
            if self._run_batch(conn, batch):
                return

    def _run_batch(self, conn: C, batch: list[Any]) -> bool:
        """Write ``batch`` (records, lists of records and calls) in order: records in one
        transaction, each call after the records before it are committed. True once the
        stop call is reached."""
        records: list[Item] = []
        mark: tuple[int, int] | None = None
        for item in batch:
            if isinstance(item, list):
                records.extend(item)
                if type(item) is Batch and item.mark is not None:
                    mark = item.mark
                continue
            if not isinstance(item, Call):
                records.append(item)
                continue
            if not item.unordered:
                conn = self._usable(conn)
                self._commit(conn, records, mark)
                records, mark = [], None
            # A caller that stopped waiting (cancelled) cancelled its future: its call is
            # skipped (no lease taken that nobody knows of), and never answered — setting
            # a cancelled future's result would raise and end this thread, and with it
            # every later flush.
            answer = item.future.set_running_or_notify_cancel()
            if not answer and not item.stop:
                continue
            try:
                value = item.fn(self._usable(conn))
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
        # Records after the last call; else the closing commit of a batch with ordered
        # calls (SQLite's journal markers of deleted segments go with it) — but not a
        # held batch tried again: the commit before each ordered call has just tried it
        # (a second try waited out another statement timeout, racing the next call).
        if records or (
            not self._pending and not all(isinstance(i, Call) and i.unordered for i in batch)
        ):
            self._commit(self._usable(conn), records, mark)
        return False

    def _closed_error(self) -> StoreError:
        """What using the closed store raises: why it failed (:attr:`_failed`), else
        that it is closed."""
        return self._failed or StoreError(f"{self._where}: the store is closed")

    def _fail_all(self, exc: BaseException) -> None:
        """The store cannot be used (it could not be opened): every call waiting now or
        later gets a :class:`StoreError` saying why — one of its own, should ``exc`` be
        another error (a bug, a bad setting), so that ``open()`` says more than that the
        store is closed."""
        err = self._as_store_error(exc)
        if not isinstance(err, StoreError):
            err = StoreError(f"{self._where}: {type(exc).__name__}: {exc}")
        with self._lock:
            self._error = self._failed = err
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

    def _forked(self) -> None:
        """In a forked child (a ``multiprocessing`` fork worker): the store is its
        parent's — the writer thread did not come with the fork, a lock another thread
        held then stays held, and the connection is the parent's — so every use says so
        at once (it used to queue records nobody would commit, and make flushes wait
        forever). A store the parent made but never opened is the child's to open."""
        self._lock = threading.Lock()
        self._batch_lock = threading.Lock()
        self._queue = queue.SimpleQueue()
        self._batch, self._batch_loop = [], None
        if self._thread is None and not self._closed:  # never opened: the child's to open
            self._pid = os.getpid()
            return
        self._failed = StoreError(
            f"{self._where}: opened by process {self._pid}, not by this forked child "
            f"({os.getpid()}): open a store of its own there"
        )
        self._closed = True
        self._thread_ended()  # (the parent's thread: nothing here to wait for)


#: Every store made in this process, told when it forks (:meth:`BatchWriter._forked`).
_writers: weakref.WeakSet[BatchWriter[Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for w in list(_writers):
        w._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
