"""What a store's flushes report (``store/_writer.py``): a commit that failed for the
database's reason and is held to be tried again, records left out, a batch lost — and
which of them a flush reports once.

The writer thread sets these as it commits; the event loop reads them after a flush. Both
sides take the store's ``_lock`` (once per commit, never per record), so that a loss
reported by a flush is cleared without dropping one the thread adds meanwhile.
"""

from __future__ import annotations

import threading
from typing import Any

from agentflow._errors import RecordsLeftOut, StoreError
from agentflow._logging import get_logger

__all__ = ["WriterErrors"]

_log = get_logger("agentflow.store")


class WriterErrors:
    """The error bookkeeping of a :class:`~agentflow.store._writer.BatchWriter`."""

    _where: str
    _lock: threading.Lock

    def _init_errors(self) -> None:
        #: What the next flush raises (``_raise_error`` words it), or ``None``.
        self._error: BaseException | None = None
        #: Why the store cannot be used at all (it could not be opened, or its writer
        #: thread failed); an error a flush reports (a batch that failed) is not that.
        self._failed: StoreError | None = None
        # Writer thread: a batch that failed for its database's or connection's reason
        # (not its records'), committed first by the next commit, and that failure.
        self._pending: list[Any] = []
        self._pending_error: BaseException | None = None

    def _raise_error(self) -> None:
        raise NotImplementedError

    def _report(self) -> None:
        """Raise what the store has to report (:meth:`_raise_error`), if anything. A loss —
        records left out, a batch lost without a journal — is reported once: the flush
        that raises it clears it (it used to stay, and every later flush, run, resume and
        close of the store raised it again). A held commit's failure stays until a commit
        succeeds (nothing is lost yet), and a failed store's error for good."""
        with self._lock:
            err = self._error
            try:
                self._raise_error()
            finally:
                if err is not None and err is not self._pending_error and err is not self._failed:
                    self._error = self._pending_error

    def _lost(self, exc: BaseException) -> None:
        """A batch was lost (no journal to keep it): the next flush reports ``exc``."""
        with self._lock:
            self._error = exc

    def _hold(self, records: list[Any], error: BaseException) -> None:
        """Keep ``records``, whose commit failed for the database's or the connection's
        reason, for the next commit to commit first; flushes report ``error`` until one
        succeeds (a loss not yet reported stays the one reported)."""
        with self._lock:
            self._pending = records
            if self._error is None or self._error is self._pending_error:
                self._error = error
            self._pending_error = error

    def _held_committed(self) -> None:
        """A commit succeeded, with what :meth:`_hold` kept: nothing of it was lost."""
        if self._pending_error is None:
            return
        with self._lock:
            if self._error is self._pending_error:
                self._error = None
            self._pending, self._pending_error = [], None

    def _left_out(self, lost: list[tuple[str, Exception]]) -> None:
        """Report records a commit left out, each failing on its own (named, with its
        error): the next flush raises them, with any left out before it not yet reported
        (one :class:`RecordsLeftOut` naming them all)."""
        with self._lock:
            earlier = self._error
            if isinstance(earlier, RecordsLeftOut):
                lost = earlier.lost + lost
            left_out = RecordsLeftOut(lost, self._where)
            if (
                earlier is None
                or earlier is self._pending_error
                or isinstance(earlier, RecordsLeftOut)
            ):
                self._error = left_out
        _log.error("store.records_left_out", store=self._where, error=str(left_out))
