"""The SQLite store's write path: records copied into the journal as they are written
(``store/_journal.py``) and committed to SQLite by the writer thread, with each
segment's marker in the same transaction. :class:`~agentflow.store.SQLiteStore` is this
writer plus its file, its reads and its leases (``store/_sqlite.py``); without a journal
(``journal=False``, no ``flock``) the path is :class:`BatchWriter`'s."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from agentflow._logging import get_logger
from agentflow.store import _sqlite_write as io
from agentflow.store._journal import Journal, Mark
from agentflow.store._records import Record
from agentflow.store._writer import Batch, BatchWriter

__all__ = ["JournaledWriter"]

_log = get_logger("agentflow.store")


class JournaledWriter(BatchWriter[sqlite3.Connection]):
    """A :class:`BatchWriter` whose records go through a journal first (see the module).

    A subclass sets ``path``, ``real_path`` (``path`` with its symbolic links resolved: the
    journal's segments go beside it), ``journal`` (whether to use it), ``batch_interval_s``
    and ``max_batch``, and calls :meth:`_init_journal` after ``_init_writer``."""

    path: Path
    real_path: Path
    journal: bool

    def _init_journal(self, *, defaulted: bool) -> None:
        #: Records committed so far (by this process).
        self.committed = 0
        #: Transactions committed so far (by this process).
        self.commits = 0
        self._journal: Journal | None = None
        # Whether batch_interval_s is the journal's default (5 s): without a journal it
        # becomes the batch path's, 10 ms, should the journal fail.
        self._interval_defaulted = defaulted
        # With the journal: where it stood after the batch that _hold keeps (a failed
        # commit's, committed first by the next: its markers cannot skip it; writer thread).
        self._pending_mark: Mark | None = None
        self._stale_keys: list[str] = []  # markers of deleted segments (writer thread)
        #: Each segment's header (``_journal_format.header``: the database's id), set by
        #: the writer thread once it has opened the database; until then — records
        #: written before ``open()`` returns — there is no journal to copy them into.
        self._journal_header: bytes | None = None

    def _commit(
        self, conn: sqlite3.Connection, records: list[Record | io.Row], mark: Mark | None
    ) -> None:
        if self._pending:  # a failed commit's records go first: order is kept
            records = self._pending + records
            mark = mark if mark is not None else self._pending_mark
        if not records and not self._stale_keys:
            return
        journal = self._journal if mark is not None else None
        if journal is not None and not self._closed:
            # The loop's next segment and pages, made with every commit of journaled
            # records (whether it succeeds or not): a busy loop hands its batches over
            # (max_batch, flushes) before the interval runs out, and the closing commit
            # is followed by no write. The first segment is made at open (``_main``).
            self._ready_journal()
        try:
            lost = self._transaction(conn, records, journal, mark)
        except Exception as exc:  # SQLite's own (locked, full, I/O), or a bug here
            # (caught here, the thread lives on: a later flush reports it, not hangs).
            # With the journal, such a failure (any of them: a damaged page as well as
            # a lock) has its records tried again first by the next commit — committing
            # later records without them would move the journal's marker past records
            # SQLite never got, and the next open would skip them; until one succeeds
            # the journal is kept, so the next open ingests them. Without a journal the
            # batch is lost (the store's error says so at the next flush).
            if journal is not None:
                self._hold(records, exc)
                self._pending_mark = mark
            else:
                self._lost(exc)
            _log.error(
                "store.write_failed", path=str(self.path), records=len(records), error=repr(exc)
            )
            return
        if lost:  # records that failed on their own: the others are committed
            _log.error("store.record_failed", path=str(self.path), error=repr(lost[0][1]))
            self._left_out([(io.describe(r), e) for r, e in lost])
        self._stale_keys = []
        self._held_committed()
        self._pending_mark = None
        if journal is not None and mark is not None:
            with self._batch_lock:  # segments wholly committed are deleted
                self._stale_keys = journal.drop_before(mark)
        if records:
            self.committed += len(records) - len(lost)
            self.commits += 1

    def _transaction(
        self,
        conn: sqlite3.Connection,
        records: list[Record | io.Row],
        journal: Journal | None,
        mark: Mark | None,
    ) -> list[tuple[Record | io.Row, Exception]]:
        """Commit ``records``, the journal's markers up to ``mark`` and the deletion of
        stale markers in one transaction. A record that fails on its own (it cannot be
        encoded or bound: a lone surrogate in a text, say) is left out instead of failing
        the transaction — returned with its error (:func:`_sqlite_write.write_each`).
        SQLite's own errors fail it."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            lost = io.write_each(conn, records)
            if journal is not None and mark is not None:
                with self._batch_lock:
                    markers = journal.committed(mark)
                conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?,?)",
                                 [(k, str(o)) for k, o in markers])  # fmt: skip
            if self._stale_keys:
                conn.executemany("DELETE FROM meta WHERE key=?", [(k,) for k in self._stale_keys])
            conn.execute("COMMIT")
        except BaseException:
            io.rollback(conn)
            raise
        return lost

    # --- the journal (store/_journal.py) --------------------------------------------------

    def write(self, record: Record) -> None:
        """Add ``record`` to the next commit: with the journal, copy it there first — from
        then on a ``kill -9`` cannot lose it (see the class).

        Raises:
            StoreError: the store is closed.
        """
        if self._thread is None or self._closed:
            super().write(record)  # starts the writer thread, or says the store is closed
            return
        # Inline, not through BatchWriter.write: this runs on the event loop once per
        # record, and on this path every call frame is paid cold (docs/store-cost.md).
        with self._batch_lock:
            journaled = self.journal  # else closed, or failed, meanwhile: the batch path
            if journaled:
                item: Record | io.Row = record
                prepared = False
                try:
                    item = io.prepare(record)  # a turn's or tool result's row, encoded now
                    prepared = True
                    journal = self._journal
                    if journal is None and self._journal_header is not None:
                        journal = self._journal = Journal(
                            self.real_path, self._batch_lock, self._journal_header
                        )  # (else the writer has not opened the database yet)
                    if journal is not None:
                        self._mark = journal.append(item)
                except Exception as exc:
                    if prepared and isinstance(exc, OSError):  # no segment (a full disk)
                        self.journal = False
                        if self._interval_defaulted:
                            self.batch_interval_s = 0.010  # the batch path's default
                        _log.error("store.journal_failed", path=str(self.path), error=repr(exc))
                    else:  # not encodable (a value whose repr raises, say): to SQLite as
                        item = record  # it is, which says what is wrong
                self._batch.append(item)
                full = len(self._batch) >= self.max_batch or not self.journal
        if not journaled:
            super().write(record)
        elif full:
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
            mark = self._mark
        return Batch(batch, mark) if batch else None

    def _ready_journal(self) -> None:
        """Writer thread: make the journal's next segment ahead of time, and write and map
        in the pages the loop copies its next records to, so that the loop pays for
        neither."""
        header = self._journal_header
        if not self.journal or header is None:
            return
        with self._batch_lock:
            journal = self._journal
            if journal is None:
                journal = self._journal = Journal(self.real_path, self._batch_lock, header)
        for ready in (journal.fill_ahead, journal.make_spare):
            try:
                ready()
            except OSError as exc:  # the loop tries again itself, and falls back if it must
                _log.warning("store.journal_spare_failed", path=str(self.path), error=repr(exc))

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
