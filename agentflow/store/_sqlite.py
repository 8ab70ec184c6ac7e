"""The default run store: one SQLite file in WAL mode, written by one thread, with a
memory-mapped journal in front of it.

Why a thread and stdlib ``sqlite3`` rather than aiosqlite: aiosqlite also runs each
connection in a thread, but every statement is a round trip — a future made on the
loop, a ``call_soon_threadsafe`` back — so each recorded turn would cost the event loop
a task wakeup. Here the loop's share of a record is one encode and one copy into the
journal (``store/_journal.py``: durable against a ``kill -9`` from then on) and one list
append; the writer thread wakes every ``batch_interval_s`` (5 s), or when a read, lease
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

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from agentflow._counts import check_count
from agentflow._errors import RecordsLeftOut, StoreError
from agentflow._logging import get_logger
from agentflow._seconds import check_lease_ttl, check_seconds
from agentflow._threads import thread_result
from agentflow.store import _journal, _journal_ingest
from agentflow.store import _sqlite_io as io
from agentflow.store._closing import wait_through_cancel
from agentflow.store._journal_format import header
from agentflow.store._journaled import JournaledWriter
from agentflow.store._protocol import LeaseOwner, RunSummary, session_ids
from agentflow.store._records import Record, StoredRun
from agentflow.store._runlock import RunLocks
from agentflow.store._schema import check_schema, refuse_other_version
from agentflow.store._sqlite_write import describe
from agentflow.store._writer import STOP, Call

__all__ = ["MAX_BUSY_TIMEOUT_S", "SQLiteStore"]

_log = get_logger("agentflow.store")
T = TypeVar("T")
#: The longest ``busy_timeout_s`` (about 24.8 days): SQLite takes it as a C ``int`` of
#: milliseconds — past 2**31 - 1 it overflowed, to no wait at all, or to an
#: ``OverflowError`` that did not name the setting.
MAX_BUSY_TIMEOUT_S = (2**31 - 1) // 1000
#: The page size of a store SQLite creates (bytes).
PAGE_SIZE = 16384


class SQLiteStore(JournaledWriter):
    """A run store in one SQLite file (see ``docs/store.md`` for its schema).

    The file is created readable and writable by its owner only (``0600``; SQLite gives
    its ``-wal`` and ``-shm`` files the same mode, and the journal's segments are made
    ``0600``). It is opened in WAL mode with ``synchronous=NORMAL``: a commit survives the
    process being killed; an operating system crash may lose the last ones. With the
    journal, a record survives the process being killed as soon as :meth:`write` returns
    (once the writer has opened the database: the journal's segments carry its id).
    One live writer per run (``store/_runlock.py``).

    Args:
        path: the database file (created with its parent directory if missing).
        batch_interval_s: how long the writer gathers records before one commit; by
            default 5 s with the journal (which keeps every record meanwhile: the
            interval only sets how often SQLite is written, ~0.8 ms of CPU per commit in
            a run here), 10 ms without. Another process reading a live store sees its
            records up to this much later. ``0`` commits every record at
            once, without a journal.
        journal: copy every record into a memory-mapped journal beside the database as
            it is written (``docs/store.md``, "The journal"); by default where the
            platform has ``flock`` (not Windows). ``False`` commits each batch to SQLite
            only, so a ``kill -9`` loses up to ``batch_interval_s`` of records.
        max_batch: records that make the writer commit at once, interval or not.
        busy_timeout_s: how long a statement waits for another process's lock: from
            1 ms to :data:`MAX_BUSY_TIMEOUT_S` (SQLite keeps it as a 32-bit count of
            milliseconds; a longer one would wait not at all).
        lease_ttl_s: how long a session's lease lasts without renewal (see
            :meth:`claim`); the fleet renews its leases every third of it.

    Raises:
        ConfigError: a value is out of range or of the wrong type (the path not a str
            or a PathLike).
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
                "SQLiteStore.journal=True needs flock, which this platform lacks; leave it unset"
            )
        defaulted = batch_interval_s is None
        if batch_interval_s is None:
            batch_interval_s = (
                0.010 if journal is False or not _journal.AVAILABLE else _journal.JOURNAL_INTERVAL_S
            )
        # (A path of None, or a string for the interval, was a bare TypeError.)
        if not isinstance(path, str | os.PathLike) or path == "":
            raise ConfigError(
                f"SQLiteStore.path must be a file path (a str or a PathLike), got "
                f"{type(path).__name__} {path!r:.80}"
            )
        batch_interval_s = check_seconds(batch_interval_s, "SQLiteStore.batch_interval_s", 0, 10)
        check_count(max_batch, "SQLiteStore.max_batch")
        busy_timeout_s = check_seconds(
            busy_timeout_s, "SQLiteStore.busy_timeout_s", 0.001, MAX_BUSY_TIMEOUT_S
        )
        check_lease_ttl(lease_ttl_s, "SQLiteStore.lease_ttl_s")
        self.path = Path(path)
        #: ``path`` with its symbolic links resolved: where SQLite keeps its WAL, and so
        #: where the journal's segments and the run locks go — a process that opens the
        #: file by another name (the link, or its target) finds the same ones.
        self.real_path = Path(os.path.realpath(self.path))
        self.batch_interval_s = batch_interval_s
        #: Whether records go through the journal (see the class).
        self.journal = journal is not False and _journal.AVAILABLE and batch_interval_s > 0
        self.max_batch = max_batch
        self.busy_timeout_s = busy_timeout_s
        self.lease_ttl_s = lease_ttl_s
        self._where = str(self.path)
        self._run_locks = RunLocks(self.real_path)
        self._db_id: bytes | None = None  # the database's (writer thread, once opened)
        self._init_writer()
        self._init_journal(defaulted=defaulted)

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
            StoreError: the file cannot be created or opened, is not an agentflow store
                (a database with other tables and no agentflow schema version: it is left
                as it was), or holds another schema version.
        """
        self._start()
        await self._call(lambda conn: None)

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise self._closed_error()  # (if it could not be opened: why)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main, name=f"agentflow-store:{self.path.name}", daemon=True
                )
                self._thread.start()

    async def aclose(self) -> None:
        """Commit what is queued and stop the writer (idempotent), waiting at most
        ``busy_timeout_s`` + 60 s. Cancelled meanwhile, it still waits for the writer to
        close the database (no longer), then raises the cancellation: the database
        closed (no ``-wal`` or ``-shm`` file left) and the run locks given back."""
        if self._thread is None or self._closed:
            self._closed = True
            try:
                await self._wait_failed_writer(self.busy_timeout_s)
            finally:
                # (A writer thread that failed closed the store: its run locks went on
                # being held until the process ended, and no other process could resume
                # its runs.)
                self._run_locks.release_all()
            return
        stop: Call[sqlite3.Connection] = Call(lambda conn: STOP, stop=True)
        self._put_stop(stop)
        try:
            await wait_through_cancel(thread_result(stop.future), self.busy_timeout_s + 60)
        except TimeoutError:
            raise StoreError(f"{self.path}: the writer did not close in time") from None
        finally:
            try:  # what the writer does after the closing call: close the connection
                if stop.future.done():
                    self._thread.join(timeout=self.busy_timeout_s)
            finally:
                self._run_locks.release_all()
        self._report()

    def close(self) -> None:
        """:meth:`aclose` for code without an event loop (blocks until it is done)."""
        if self._thread is None or self._closed:
            self._closed = True
            try:
                if self._thread is not None and self._thread is not threading.current_thread():
                    self._thread.join(timeout=self.busy_timeout_s)  # (see aclose)
            finally:
                self._run_locks.release_all()
            return
        stop: Call[sqlite3.Connection] = Call(lambda conn: STOP, stop=True)
        self._put_stop(stop)
        try:
            stop.future.result(timeout=self.busy_timeout_s + 60)
            self._thread.join(timeout=self.busy_timeout_s)
        finally:
            self._run_locks.release_all()
        self._report()

    # --- reads and leases (on the writer thread, after what was written before) ---------

    async def load(self, run_id: str, sessions: Sequence[str] | None = None) -> StoredRun:
        """Everything recorded about ``run_id`` (or only its ``sessions``);
        :class:`RunNotFound` if nothing is."""
        only = session_ids(sessions)

        def load(conn: sqlite3.Connection) -> StoredRun:
            self._ingest_orphans(conn)  # a writer killed since this store opened
            return io.load_run(conn, run_id, str(self.path), only)

        return await self._call(load)

    async def start_attempt(self, run_id: str, wall_ns: int, clock_ns: int) -> int:
        """Record the next attempt at ``run_id`` and return its number.

        Raises:
            StoreError: another attempt through this store, another live process or
                another open store writes the run: a SQLite store has one writer per run
                (``store/_runlock.py``).
        """
        self._run_locks.begin(run_id)

        def start(conn: sqlite3.Connection) -> int:
            self._ingest_orphans(conn)  # a writer killed since this store opened
            return io.start_attempt(conn, run_id, wall_ns, clock_ns, str(self.path))

        try:
            return await self._call(start)
        except BaseException:
            self._run_locks.release(run_id)  # no attempt started: nothing writes the run
            raise

    async def runs(self) -> list[RunSummary]:
        """Every stored run, newest first."""
        return await self._call(io.list_runs)

    async def claim(
        self, run_id: str, session_ids: Sequence[str], owner: LeaseOwner, ttl_s: float
    ) -> list[str]:
        """Take the free leases among ``session_ids`` for ``ttl_s`` seconds.

        A lease is free when nobody holds it, it expired, it is ``owner``'s, or its
        holder was a process on this host that no longer exists, or an attempt of this
        process that has ended (a killed run's leases are taken over at once, without
        waiting for them to expire).

        Raises:
            StoreError: another attempt through this store (another ``owner``), another
                live process or another open store writes the run.
        """
        check_lease_ttl(ttl_s, "SQLiteStore.claim: ttl_s")
        self._run_locks.acquire(run_id, owner)
        ids = list(session_ids)

        def claim(conn: sqlite3.Connection) -> list[str]:
            return io.claim(conn, run_id, ids, owner, ttl_s)

        return await self._call(claim)

    async def renew(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> list[str]:
        """Extend ``owner``'s leases in the run; returns the session ids it still holds."""
        check_lease_ttl(ttl_s, "SQLiteStore.renew: ttl_s")
        return await self._call(lambda conn: io.renew(conn, run_id, owner, ttl_s))

    async def release(
        self, run_id: str, owner: LeaseOwner, sessions: Sequence[str] | None = None
    ) -> None:
        """Give back every lease ``owner`` holds in the run (or those of ``sessions``)."""
        ids = None if sessions is None else list(sessions)
        try:
            await self._call(lambda conn: io.release(conn, run_id, owner, ids))
        finally:
            if ids is None:  # the attempt ended (should its leases stay in the file, they
                self._run_locks.release(run_id, owner)  # are free: their owner is gone)

    async def conflicts(self, run_id: str) -> list[str]:
        """Writes refused because their key was already recorded (``kind key`` lines)."""
        return await self._call(lambda conn: io.conflicts(conn, run_id))

    # --- the writer thread ------------------------------------------------------------

    def _raise_error(self) -> None:
        err = self._error
        if isinstance(err, RecordsLeftOut):  # the records named; the others are committed
            raise RecordsLeftOut(err.lost, err.where)
        if err is not None:
            raise StoreError(f"{self.path}: a write failed: {err!r}") from err

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
            # A new file's pages are 16 KiB (SQLite's default is 4): a turn's row is ~2 KB,
            # and a commit writes each page to the WAL and again at the checkpoint, a few
            # system calls per page — ~7% less of the writer's CPU on the demo
            # (``docs/store-cost.md``). A no-op on a file that has pages already.
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            # Before anything is written: another version's store, or another
            # application's database, is left as it was (no WAL mode, no tables).
            made = refuse_other_version(conn, str(self.path))
            _wal(conn, self.busy_timeout_s)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            check_schema(conn, str(self.path), new=made)
            self._db_id = _journal_ingest.database_id(conn)
            self._journal_header = header(self._db_id)
            # What a killed writer's journal holds goes in before anything is read (not
            # an earlier format's, with no id, beside a database this open made).
            self._ingest_orphans(conn, legacy=not made)
        except BaseException:
            conn.close()
            raise
        return conn

    def _ingest_orphans(self, conn: sqlite3.Connection, *, legacy: bool = True) -> None:
        """Commit what the journals of writers that died hold (writer thread): at open,
        and again before a run is loaded or an attempt starts — a store open for long
        may outlive a writer killed meanwhile. Only segments written for this database
        (``legacy``: and those of an earlier format, which carry no id)."""
        lost: list[tuple[Record | io.Row, Exception]] = []
        _journal_ingest.ingest_orphans(
            conn, self.real_path, io.write_records, lost, db_id=self._db_id, legacy=legacy
        )
        if lost:  # the next flush names them, as it does a live commit's
            self._left_out([(describe(r), e) for r, e in lost])

    def _main(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
        except Exception as exc:  # whatever it is, open() and every call say so
            if not isinstance(exc, sqlite3.Error | OSError | StoreError):
                exc = StoreError(f"{self.path}: cannot be opened: {exc!r}")
            self._fail_all(exc)
            self._thread_ended()
            return
        # The loop's first segment, made as the writer starts (before open() returns,
        # or at a store's first write): the next ones come with each commit
        # (``_commit``). Outside the serving loop's failure handling, so nothing
        # may escape: without a spare the loop makes its segment itself.
        try:
            self._ready_journal()
        except Exception as exc:
            _log.error("store.journal_spare_failed", path=str(self.path), error=repr(exc))
        stopped = False
        try:
            self._loop(conn)
            # (Not if the loop failed on its own: the batches it dropped are only in the
            # journal, which the next open then ingests.)
            stopped = self._failed is None
        finally:
            try:
                self._close_journal(conn, delete=stopped)
                conn.close()
            finally:
                self._thread_ended()


def _wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Put the file in WAL mode. Two openers of a new file at once: SQLite may answer one
    "database is locked" at once, without waiting out the busy timeout (it would
    deadlock otherwise), so it is asked again for up to that long."""
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.005)


def _as_store_error(exc: BaseException, path: Path) -> BaseException:
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sqlite3.Error | OSError):
        return StoreError(f"{path}: {exc}")
    return exc
