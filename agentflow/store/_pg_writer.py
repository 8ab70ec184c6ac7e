"""What :class:`~agentflow.store.PostgresStore`'s writer thread does with a batch: one
try at a commit with the store's commit marker, a batch held (in order, ahead of the
next) while the server cannot take it — at most ``max_held`` turns and tool results
waiting, past which ``write`` refuses the next one — and the tries whose connection was
lost settled by the marker on a new connection; and a first connection that failed (the
thread ends, the calls waiting told why, the records kept for the next thread). The
connection itself (made, lost, replaced) is the store's (``store/_postgres.py``)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import queue
import secrets
from typing import Any

from agentflow._errors import RecordsLeftOut, StoreBacklogFull, StoreError
from agentflow._logging import get_logger
from agentflow.store import _pg_io as io
from agentflow.store._pg_conn import Watchdog
from agentflow.store._records import Record, ToolFinished, TurnFinished, describe_record
from agentflow.store._writer import BatchWriter, Call

__all__ = ["MAX_HELD", "PgWriter"]

_log = get_logger("agentflow.store")
Conn = Any  # psycopg.Connection, imported lazily (the ``pg`` extra)
_SESSION_RECORDS = ("TurnFinished", "ToolFinished", "SessionEnded")

#: ``PostgresStore``'s default ``max_held``: turns and tool results that may wait to be
#: committed.
MAX_HELD = 100_000

#: The records ``max_held`` counts: those a running fleet goes on writing (a turn's, a
#: tool result's). The others — a run's or session's start and end, a policy's state —
#: are a few per session, and always taken: refused, a session could not even end.
_BOUNDED = (TurnFinished, ToolFinished)


def _bounded(records: list[Record]) -> int:
    """How many of ``records`` ``max_held`` counts."""
    return sum(1 for r in records if type(r) in _BOUNDED)


class PgWriter(BatchWriter[Conn]):
    """The commit path of :class:`~agentflow.store.PostgresStore` (see the module). The
    store sets ``_where``, ``max_held``, ``_watchdog`` and ``_holders`` and calls
    :meth:`_init_commits` after ``_init_writer``."""

    max_held: int
    _watchdog: Watchdog
    _holders: dict[tuple[str, str], str]

    def _init_commits(self) -> None:
        # Writer thread: why the last try at a new connection failed (None once one is
        # made): a close that drops held records says it (_drop_held).
        self._reconnect_failed: str | None = None
        # Writer thread: whether the store has ``sessions.ended_attempt`` (set as it
        # connects: ``_pg_schema.ended_attempts``).
        self._stamp_ends = False
        # Writer thread only: this store's commit marker in ``meta`` (one row, removed
        # at close), the number of the last try at a commit, and the tries whose
        # connection was lost before their outcome was known: (number, how many of the
        # held batch's leading records it wrote, those it left out).
        self._marker = f"writer:{secrets.token_hex(8)}"
        self._seq = 0
        self._tries: list[tuple[int, int, list[tuple[Record, Exception]]]] = []
        # Turns and tool results written so far (``write``: numbered by ``_writes``,
        # whichever thread writes), and those of them committed or left out (writer
        # thread): the difference waits to be committed — in the loop's batch, the
        # queue, or held.
        self._writes = itertools.count(1)
        self._written = 0
        self._settled = 0
        #: Records committed so far (by this process).
        self.committed = 0
        #: Transactions committed so far (by this process).
        self.commits = 0

    @property
    def waiting(self) -> int:
        """Turns and tool results written and not committed yet (nor left out): held
        while the server cannot take them, or on their way to the writer thread."""
        return max(0, self._written - self._settled)

    def write(self, record: Record) -> None:
        """Add ``record`` to the next batch (on an event loop: a list append and a count).

        Raises:
            StoreBacklogFull: ``record`` is a turn or a tool result, and ``max_held`` of
                them already wait to be committed — held while the server is unreachable
                or refusing them, or still on their way to it (a burst larger than
                ``max_held`` within one batch counts too: keep ``max_held`` well above
                ``max_batch``): those are kept, and committed first once it takes them;
                this one is refused.
            StoreError: the store is closed.
        """
        if type(record) not in _BOUNDED:
            super().write(record)
            return
        waiting = self._written - self._settled
        if waiting >= self.max_held and not self._closed:
            err = self._pending_error
            why = "" if err is None else f"the last commit failed: {err}"
            raise StoreBacklogFull(waiting, self.max_held, self._where, why)
        super().write(record)
        self._written = next(self._writes)

    def _raise_error(self) -> None:
        err = self._error
        if isinstance(err, RecordsLeftOut):  # the records named; the others are committed
            raise RecordsLeftOut(err.lost, err.where)
        if err is not None:
            raise StoreError(f"{self._where}: a write failed: {err}") from None

    def _commit(self, conn: Conn, records: list[Record], mark: tuple[int, int] | None) -> None:
        with self._watchdog.watching(conn):
            self._commit_watched(conn, records)

    def _commit_watched(self, conn: Conn, records: list[Record]) -> None:
        if self._pending:  # a batch held (see below) goes first: order is kept
            records = self._pending + records
        if not records:
            return
        counted = _bounded(records)
        conn = self._usable(conn)
        lost: list[tuple[Record, Exception]] = []
        try:
            if self._tries and not conn.closed:
                records = self._settle(conn, records)
            try:
                self._try(conn, records, lost)
            except Exception:
                fresh = self._usable(conn) if conn.closed else conn
                if fresh is conn:
                    raise
                # Lost just now: once more at once, on the new connection — without what
                # the lost try committed if it did (only its reply lost): writing those
                # rows again would note each as a conflict.
                records = self._settle(fresh, records)
                self._try(fresh, records, lost)
        except Exception as exc:  # the connection's, or the server's
            # The batch, less what a lost try committed, waits for the next commit (on a
            # new connection if this one was lost), which clears the error once it
            # succeeds; until then flushes report it. So does a batch the server
            # refused (a statement timeout, a read-only server after a failover).
            self._hold(records, self._as_store_error(exc))
            self._settled += counted - _bounded(records)  # (committed by a lost try)
            _log.error(
                "store.write_failed", store=self._where, records=len(records), error=str(exc)
            )
            return
        self._held_committed()
        self._settled += counted
        if records:
            self._count(len(records), lost)

    def _drop_held(self) -> None:
        """The store closes with a batch still held (no connection could be made, or the
        server refused it): those records are lost, and the close says how many. (It
        raised the held commit's error, "the connection is closed", as a flush would:
        nothing said the records were gone.)"""
        held = self._pending
        if not held:
            return
        why = (
            f"{len(held)} records were not written (the store closed with them held): "
            f"{self._pending_error}"
        )
        if self._reconnect_failed is not None:
            why += f" (the last try at a new connection: {self._reconnect_failed})"
        _log.error("store.held_records_lost", store=self._where, records=len(held), error=why)
        with self._lock:
            earlier = self._error
            if earlier is not None and earlier is not self._pending_error:
                why += f"; and before them: {earlier}"  # (a loss not reported yet)
            self._error = StoreError(why)  # (for aclose: the store is closing)
            self._pending, self._pending_error = [], None

    def _try(self, conn: Conn, records: list[Record], lost: list[tuple[Record, Exception]]) -> None:
        """One try at committing ``records`` (with the marker of a new try number); what
        it left out goes to ``lost``. Should the connection be lost meanwhile, the try is
        kept in ``_tries`` until a new connection learns whether it committed."""
        if not records:
            return
        self._seq += 1
        left_out: list[tuple[Record, Exception]] = []
        try:
            self._write(conn, records, self._seq, left_out)
        except Exception:
            if conn.closed:
                self._tries.append((self._seq, len(records), left_out))
            raise
        lost.extend(left_out)

    def _settle(self, conn: Conn, records: list[Record]) -> list[Record]:
        """``records`` (the batch held) without the leading ones that a try whose
        connection was lost committed: the server may have committed it and lost only
        its reply, and the marker its transaction set says so. That try is counted, and
        what it left out reported, here. Every try so far is settled by this one answer:
        their connections are gone."""
        committed = io.marker(conn, self._marker)
        tries, self._tries = self._tries, []
        for seq, n, left_out in tries:
            if seq == committed:
                self._count(n, left_out)
                return records[n:]
        return records

    def _count(self, n: int, lost: list[tuple[Record, Exception]]) -> None:
        """A commit of ``n`` records happened, which left ``lost`` out."""
        if lost:
            self._left_out([(describe_record(r), e) for r, e in lost])
        self.committed += n - len(lost)
        self.commits += 1

    def _write(
        self, conn: Conn, records: list[Record], seq: int, lost: list[tuple[Record, Exception]]
    ) -> None:
        """Commit ``records`` and the marker of try ``seq`` (:func:`_pg_io.commit`)."""
        io.commit(
            conn, records, self._owner, (self._marker, seq), lost, self._where,
            stamp_ends=self._stamp_ends,
        )  # fmt: skip

    def _owner(self, r: Record) -> str | None:
        """The lease holder ``r``'s session must still have; for a turn or tool result of
        a session this store holds no lease of, :data:`~agentflow.store._pg_io.FREE`: no
        other may hold a live one (it used to be written unchecked, into a session
        another worker ran). ``None``: not checked — a record of no session, or the end
        of one this store does not hold (a resume records the end of a session whose
        final answer is recorded without claiming it)."""
        name = type(r).__name__
        if name in _SESSION_RECORDS:
            held = self._holders.get((r.run_id, r.session_id))  # type: ignore[union-attr]
            if held is None and name != "SessionEnded":
                return io.FREE
            return held
        return None

    def _as_store_error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, Exception) and type(exc).__module__.startswith("psycopg"):
            return StoreError(f"{self._where}: {type(exc).__name__}: {exc}")
        return exc

    def _open_failed(self, exc: Exception, ended: concurrent.futures.Future[None]) -> None:
        """The writer thread's first connection failed (the server is down, the login
        refused): every call waiting gets a :class:`StoreError` saying why, and the thread
        ends — the store stays usable, the next call (``open()``) starts a new thread that
        connects again. (The store used to fail for good: every later call raised this
        first error, the server up or not.) Records written meanwhile stay queued, in
        order, for that thread; a store closing meanwhile closes (its records, if any,
        reported lost by ``aclose``)."""
        self._watchdog.idle()
        err = self._as_store_error(exc)
        if not isinstance(err, StoreError):
            err = StoreError(f"{self._where}: {type(exc).__name__}: {exc}")
        _log.warning("store.open_failed", store=self._where, error=str(err))
        with self._lock:
            closing = self._closed  # (aclose queued its stop call: the store stays closed)
            if closing:
                self._failed = err
            else:
                self._thread = None  # (before any call is answered: the next starts anew)
            ended.set_result(None)
            kept: list[Any] = []
            with contextlib.suppress(queue.Empty):
                while True:
                    item = self._queue.get_nowait()
                    if not isinstance(item, Call):
                        kept.append(item)
                    elif not item.future.set_running_or_notify_cancel():
                        continue
                    elif item.stop:
                        item.future.set_result(None)
                    else:
                        item.future.set_exception(err)
            # Its watchdog too (under the lock: the next thread starts it again): it
            # used to stay, one thread more per failed open of a store.
            self._watchdog.stop()
            if not closing:
                for item in kept:
                    self._queue.put(item)
            elif kept:  # never committed: the closing call reports them lost
                n = sum(len(item) if isinstance(item, list) else 1 for item in kept)
                self._error = StoreError(f"{self._where}: {n} records were not written: {err}")
