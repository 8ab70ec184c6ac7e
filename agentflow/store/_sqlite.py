"""The default run store: one SQLite file in WAL mode, written by one thread, with a
memory-mapped journal in front of it.

Why a thread and stdlib ``sqlite3`` rather than aiosqlite: aiosqlite also runs each
connection in a thread, but every statement is a round trip — a future made on the
loop, a ``call_soon_threadsafe`` back — so each recorded turn would cost the event loop
a task wakeup. Here the loop's share of a record is one encode and one copy into the
journal (``store/_journal.py``: durable against a ``kill -9`` from then on) and one list
append; the writer thread wakes every ``batch_interval_s`` (1 s), or when a read, lease
change or flush needs it, and commits what was written meanwhile in one transaction.
SQLite releases the GIL while it works, so the loop keeps streaming meanwhile.

Without a journal (``journal=False``, or where there is no ``flock``), a batch is handed
to the thread ``batch_interval_s`` (10 ms) after its first record (``store/_writer.py``),
and a ``kill -9`` loses what was not yet committed.

Everything that touches the database — writes, reads (:meth:`load`), lease changes —
runs on that one thread, in the order it was asked for: a read sees every record
written before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from agentflow._errors import StoreError
from agentflow._logging import get_logger
from agentflow.store import _journal
from agentflow.store import _sqlite_io as io
from agentflow.store._journal import Journal, Mark
from agentflow.store._protocol import LeaseOwner, RunSummary
from agentflow.store._records import Record, StoredRun
from agentflow.store._runlock import RunLocks
from agentflow.store._schema import check_schema
from agentflow.store._writer import STOP, Batch, BatchWriter, Call

__all__ = ["SQLiteStore"]

_log = get_logger("agentflow.store")
T = TypeVar("T")


class SQLiteStore(BatchWriter[sqlite3.Connection]):
    """A run store in one SQLite file (see ``docs/store.md`` for its schema).

    The file is created readable and writable by its owner only (``0600``; SQLite gives
    its ``-wal`` and ``-shm`` files the same mode, and the journal's segments are made
    ``0600``). It is opened in WAL mode with ``synchronous=NORMAL``: a commit survives the
    process being killed; an operating system crash may lose the last ones. With the
    journal, a record survives the process being killed as soon as :meth:`write` returns.
    One live writer per run (``store/_runlock.py``).

    Args:
        path: the database file (created with its parent directory if missing).
        batch_interval_s: how long the writer gathers records before one commit; by
            default 1 s with the journal, 10 ms without. Another process reading a live
            store sees its records up to this much later. ``0`` commits every record at
            once, without a journal.
        journal: copy every record into a memory-mapped journal beside the database as
            it is written (``docs/store.md``, "The journal"); by default where the
            platform has ``flock`` (not Windows). ``False`` commits each batch to SQLite
            only, so a ``kill -9`` loses up to ``batch_interval_s`` of records.
        max_batch: records that make the writer commit at once, interval or not.
        busy_timeout_s: how long a statement waits for another process's lock.
        lease_ttl_s: how long a session's lease lasts without renewal (see
            :meth:`claim`); the fleet renews its leases every third of it.

    Raises:
        ConfigError: a value is out of range.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        batch_interval_s: float | None = None,
        journal: bool | None = None,
        max_batch: int = 1024,
        busy_timeout_s: float = 30.0,
        lease_ttl_s: float = 60.0,
    ) -> None:
        from agentflow._errors import ConfigError

        if journal is True and not _journal.AVAILABLE:
            raise ConfigError(
                "SQLiteStore.journal=True needs flock and posix_fallocate, which this "
                "platform lacks; leave it unset"
            )
        if batch_interval_s is None:
            batch_interval_s = 0.010 if journal is False or not _journal.AVAILABLE else 1.0
        if not 0 <= batch_interval_s <= 10:
            raise ConfigError(
                f"SQLiteStore.batch_interval_s must be in [0, 10], got {batch_interval_s!r}"
            )
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ConfigError(f"SQLiteStore.max_batch must be an int ≥ 1, got {max_batch!r}")
        if not busy_timeout_s > 0:
            raise ConfigError(f"SQLiteStore.busy_timeout_s must be > 0, got {busy_timeout_s!r}")
        if not lease_ttl_s > 0:
            raise ConfigError(f"SQLiteStore.lease_ttl_s must be > 0, got {lease_ttl_s!r}")
        self.path = Path(path)
        self.batch_interval_s = batch_interval_s
        #: Whether records go through the journal (see the class).
        self.journal = journal is not False and _journal.AVAILABLE and batch_interval_s > 0
        self.max_batch = max_batch
        self.busy_timeout_s = busy_timeout_s
        self.lease_ttl_s = lease_ttl_s
        self._where = str(self.path)
        self._run_locks = RunLocks(self.path)
        self._init_writer()
        #: Records committed so far (by this process).
        self.committed = 0
        #: Transactions committed so far (by this process).
        self.commits = 0
        self._journal: Journal | None = None
        # With the journal: a failed commit's records and mark, committed first by the
        # next commit (the journal's markers cannot skip them; writer thread).
        self._pending: list[Record | io.Row] = []
        self._pending_mark: Mark | None = None
        self._stale_keys: list[str] = []  # markers of deleted segments (writer thread)

    #: ``Fleet.run`` keeps a session's lease until the attempt ends rather than giving
    #: it back as the session ends: a second live writer of a run is refused (one
    #: machine, one file), so nobody could take it meanwhile, and each release would
    #: be one more commit.
    release_each_session = False

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # --- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        """Create the file (``0600``) and its tables, or open them; start the writer.

        Raises:
            StoreError: the file cannot be created or opened, is not a store, or holds
                another schema version.
        """
        self._start()
        await self._call(lambda conn: None)

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                if isinstance(self._error, StoreError):
                    raise self._error  # it could not be opened: say why
                raise StoreError(f"{self.path}: the store is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main, name=f"agentflow-store:{self.path.name}", daemon=True
                )
                self._thread.start()

    async def aclose(self) -> None:
        """Commit what is queued and stop the writer (idempotent)."""
        if self._thread is None or self._closed:
            self._closed = True
            return
        stop: Call[sqlite3.Connection] = Call(lambda conn: STOP, stop=True)
        self._put_stop(stop)
        try:
            await asyncio.wrap_future(stop.future)
            self._thread.join(timeout=self.busy_timeout_s)
        finally:
            self._run_locks.release_all()
        self._raise_error()

    def close(self) -> None:
        """:meth:`aclose` for code without an event loop (blocks until it is done)."""
        if self._thread is None or self._closed:
            self._closed = True
            return
        stop: Call[sqlite3.Connection] = Call(lambda conn: STOP, stop=True)
        self._put_stop(stop)
        try:
            stop.future.result(timeout=self.busy_timeout_s + 60)
            self._thread.join(timeout=self.busy_timeout_s)
        finally:
            self._run_locks.release_all()
        self._raise_error()

    # --- reads and leases (on the writer thread, after what was written before) ---------

    async def load(self, run_id: str, sessions: Sequence[str] | None = None) -> StoredRun:
        """Everything recorded about ``run_id`` (or only its ``sessions``);
        :class:`RunNotFound` if nothing is."""
        only = None if sessions is None else list(sessions)
        return await self._call(lambda conn: io.load_run(conn, run_id, str(self.path), only))

    async def start_attempt(self, run_id: str, wall_ns: int, clock_ns: int) -> int:
        """Record the next attempt at ``run_id`` and return its number.

        Raises:
            StoreError: another live process (or open store) writes the run: a SQLite
                store has one writer per run (``store/_runlock.py``).
        """
        self._run_locks.acquire(run_id)

        def start(conn: sqlite3.Connection) -> int:
            self._ready_journal()  # recording starts: the loop's first segment, made here
            return io.start_attempt(conn, run_id, wall_ns, clock_ns, str(self.path))

        return await self._call(start)

    async def runs(self) -> list[RunSummary]:
        """Every stored run, newest first."""
        return await self._call(io.list_runs)

    async def claim(
        self, run_id: str, session_ids: Sequence[str], owner: LeaseOwner, ttl_s: float
    ) -> list[str]:
        """Take the free leases among ``session_ids`` for ``ttl_s`` seconds.

        A lease is free when nobody holds it, it expired, it is ``owner``'s, or its
        holder was a process on this host that no longer exists (a killed run's leases
        are taken over at once, without waiting for them to expire).

        Raises:
            StoreError: another live process (or open store) writes the run.
        """
        self._run_locks.acquire(run_id, owner)
        ids = list(session_ids)

        def claim(conn: sqlite3.Connection) -> list[str]:
            self._ready_journal()  # recording starts: the loop's first segment, made here
            return io.claim(conn, run_id, ids, owner, ttl_s)

        return await self._call(claim)

    async def renew(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> list[str]:
        """Extend ``owner``'s leases in the run; returns the session ids it still holds."""
        return await self._call(lambda conn: io.renew(conn, run_id, owner, ttl_s))

    async def release(
        self, run_id: str, owner: LeaseOwner, sessions: Sequence[str] | None = None
    ) -> None:
        """Give back every lease ``owner`` holds in the run (or those of ``sessions``)."""
        ids = None if sessions is None else list(sessions)
        await self._call(lambda conn: io.release(conn, run_id, owner, ids))
        if ids is None:  # the attempt ended: another process may write the run now
            self._run_locks.release(run_id, owner)

    async def conflicts(self, run_id: str) -> list[str]:
        """Writes refused because their key was already recorded (``kind key`` lines)."""
        return await self._call(lambda conn: io.conflicts(conn, run_id))

    # --- the writer thread ------------------------------------------------------------

    def _raise_error(self) -> None:
        if self._error is not None:
            raise StoreError(f"{self.path}: a write failed: {self._error!r}") from self._error

    def _as_store_error(self, exc: BaseException) -> BaseException:
        return _as_store_error(exc, self.path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # before SQLite creates it
        os.close(fd)
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=True
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            check_schema(conn, str(self.path))
            # What a killed writer's journal holds goes in before anything is read.
            _journal.ingest_orphans(conn, self.path, io.write_records)
        except BaseException:
            conn.close()
            raise
        return conn

    def _main(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
        except (sqlite3.Error, OSError, StoreError) as exc:
            self._fail_all(exc)
            return
        stopped = False
        try:
            self._loop(conn)
            stopped = True
        finally:
            self._close_journal(conn, delete=stopped)
            conn.close()

    def _commit(
        self, conn: sqlite3.Connection, records: list[Record | io.Row], mark: Mark | None
    ) -> None:
        if self._pending:  # a failed commit's records go first: order is kept
            records = self._pending + records
            mark = mark if mark is not None else self._pending_mark
        if not records and not self._stale_keys:
            return
        journal = self._journal if mark is not None else None
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                io.write_records(conn, records)
                if journal is not None and mark is not None:
                    with self._batch_lock:
                        markers = journal.committed(mark)
                    conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?,?)",
                                     [(k, str(o)) for k, o in markers])  # fmt: skip
                if self._stale_keys:
                    conn.executemany(
                        "DELETE FROM meta WHERE key=?", [(k,) for k in self._stale_keys]
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except Exception as exc:  # SQLite's, or a record that cannot be encoded
            # (caught here, the thread lives on: a later flush reports it, not hangs).
            # With the journal, a failure of SQLite's own (locked, full, I/O) has its
            # records tried again first by the next commit — committing later records
            # without them would leave the journal's marker behind records SQLite
            # holds, and the next open would ingest those twice; until one succeeds the
            # journal is kept, so the next open ingests them. A record that fails
            # (cannot be encoded or bound) would fail every retry: its batch is dropped,
            # as without a journal, and the next commit's markers pass it.
            self._error = exc
            if journal is not None and isinstance(exc, sqlite3.OperationalError):
                self._pending, self._pending_mark = records, mark
            _log.error(
                "store.write_failed", path=str(self.path), records=len(records), error=repr(exc)
            )
            return
        self._stale_keys = []
        self._pending, self._pending_mark = [], None
        if journal is not None and mark is not None:
            with self._batch_lock:  # segments wholly committed are deleted
                self._stale_keys = journal.drop_before(mark)
        if records:
            self.committed += len(records)
            self.commits += 1

    # --- the journal (store/_journal.py) --------------------------------------------------

    def write(self, record: Record) -> None:
        """Add ``record`` to the next commit: with the journal, copy it there first — from
        then on a ``kill -9`` cannot lose it (see the class).

        Raises:
            StoreError: the store is closed.
        """
        if not self.journal or self._thread is None or self._closed:
            super().write(record)  # starts the writer thread, or says the store is closed
            return
        # Inline, not through BatchWriter.write: this runs on the event loop once per
        # record, and on this path every call frame is paid cold (docs/store.md, "Cost").
        with self._batch_lock:
            item: Record | io.Row = record
            try:
                item = io.prepare(record)  # a turn's or tool result's row, encoded now
                journal = self._journal
                if journal is None:
                    journal = self._journal = Journal(self.path, self._batch_lock)
                self._mark = journal.append(item)
            except (TypeError, ValueError, OverflowError):
                pass  # not encodable: it goes to SQLite as it is, which says what is wrong
            except OSError as exc:  # no segment could be made (a full disk)
                self.journal = False
                _log.error("store.journal_failed", path=str(self.path), error=repr(exc))
            self._batch.append(item)
            full = len(self._batch) >= self.max_batch or not self.journal
        if full:
            self._hand_over()

    def _enqueue(self, record: Record) -> None:
        if self.journal:
            self.write(record)  # the writer thread has started: the journal's path
        else:
            super()._enqueue(record)

    def _idle_wait_s(self) -> float:
        return self.batch_interval_s if self.journal else super()._idle_wait_s()

    def _take_idle(self) -> list[Record] | None:
        if not self.journal:
            return super()._take_idle()
        with self._batch_lock:  # whatever was written since the last commit
            if not self._queue.empty():
                # Handed over since the wait ran out (a full batch, a call): that goes
                # first. Taking the newer records now would commit them before it, and
                # commit their journal mark before its older one (the marker would
                # move back: the next open would ingest those records twice).
                return None
            batch, self._batch = self._batch, []
            journal, mark = self._journal, self._mark
        if journal is not None:
            self._ready_journal()
        return Batch(batch, mark) if batch else None

    def _ready_journal(self) -> None:
        """Writer thread: make the journal's next segment ahead of time and map in the
        pages the loop writes next, so that the loop pays for neither (the reservation
        of a segment is ~2–3 ms of CPU here)."""
        if not self.journal:
            return
        with self._batch_lock:
            journal = self._journal
            if journal is None:
                journal = self._journal = Journal(self.path, self._batch_lock)
        try:
            journal.make_spare()
        except OSError as exc:  # the loop tries again itself, and falls back if it must
            _log.warning("store.journal_spare_failed", path=str(self.path), error=repr(exc))
        journal.prefault()

    def _close_journal(self, conn: sqlite3.Connection, *, delete: bool) -> None:
        """Let go of the journal as the writer ends: delete it when everything it holds
        is committed (the store closed cleanly), else keep it for the next open."""
        with self._batch_lock:
            journal, self._journal = self._journal, None
            self.journal = False
            delete = delete and not self._pending and not self._batch
        if journal is None:
            return
        keys = self._stale_keys + journal.close(delete=delete)
        if keys:
            with contextlib.suppress(sqlite3.Error):  # else the next open deletes them
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("DELETE FROM meta WHERE key=?", [(k,) for k in keys])
                conn.execute("COMMIT")


def _as_store_error(exc: BaseException, path: Path) -> BaseException:
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sqlite3.Error | OSError):
        return StoreError(f"{path}: {exc}")
    return exc
