"""One live writer per run in a SQLite store: an exclusive lock file per run.

SQLite is one machine's file; several processes can open it, and before this two of
them could resume the same run at once. They would share it through the session leases
(each session run by one of them at a time), but without fencing: a process that
stalled past its leases' time to live could still write into a session another had
taken over (its duplicates were refused, as conflicts, but a turn past the other's was
not). So :class:`~agentflow.store.SQLiteStore` refuses a second live writer of a run
instead: the store that records an attempt at a run (``Fleet.run``'s first claim, or
``Fleet.resume``'s :meth:`start_attempt`) takes an exclusive ``flock`` on
``<db>.af-run-<digest of run id>.lock`` (holding its pid, for the error message) and
keeps it until every lease owner that claimed through this store has given its leases
back (the attempt ended), or the store closes. The kernel drops
the lock when the process dies, ``kill -9`` included, so a killed run is resumed at
once. Where there is no ``flock`` (Windows), no run lock is taken: one writer per run is
then the user's to keep. Workers that share a run need :class:`~agentflow.store.PostgresStore`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import weakref
from pathlib import Path

from agentflow._errors import StoreError

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no run lock there, as documented
    fcntl = None  # type: ignore[assignment]

__all__ = ["RunLocks"]


class RunLocks:
    """The run locks one store holds (by run id)."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._held: dict[str, tuple[int, Path]] = {}
        self._owners: dict[str, set[object]] = {}
        _live.add(self)

    def path(self, run_id: str) -> Path:
        """The lock file of ``run_id``."""
        digest = hashlib.blake2b(run_id.encode("utf-8", "surrogatepass"), digest_size=8)
        return self.db.with_name(f"{self.db.name}.af-run-{digest.hexdigest()}.lock")

    def acquire(self, run_id: str, owner: object = None) -> None:
        """Hold ``run_id``'s lock (no-op if this store holds it already), for ``owner``
        (a lease owner) if given: the lock is kept until each owner has let go.

        Raises:
            StoreError: another live process (or another open store) writes the run.
        """
        if run_id not in self._held and fcntl is not None:
            self._lock(run_id)
        if owner is not None:  # only once the lock is held: a refused owner holds nothing
            self._owners.setdefault(run_id, set()).add(owner)

    def _lock(self, run_id: str) -> None:
        """Take the run's lock file (see :meth:`acquire`)."""
        path = self.path(run_id)
        while True:
            fd = self._try(run_id, path)
            # The holder removes the file as it lets go: a lock taken on a file that was
            # removed meanwhile is no lock (another store may have made a new one).
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._held[run_id] = (fd, path)

    def _try(self, run_id: str, path: Path) -> int:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"{self.db}: cannot create the run lock {path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StoreError(
                f"{self.db}: run {run_id!r} is being written by another live process "
                f"(pid {holder}); a SQLite store has one writer per run — wait for it to "
                "end (or stop it), or share the run between workers with PostgresStore"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def release(self, run_id: str, owner: object = None) -> None:
        """``owner`` let go of the run; once no owner is left (or with ``owner=None``),
        let go of ``run_id``'s lock, if held (the file is removed)."""
        owners = self._owners.get(run_id)
        if owner is not None and owners:
            owners.discard(owner)
            if owners:
                return  # another attempt through this store still writes the run
        self._owners.pop(run_id, None)
        held = self._held.pop(run_id, None)
        if held is None:
            return
        fd, path = held
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)

    def release_all(self) -> None:
        """Let go of every lock this store holds."""
        for run_id in list(self._held):
            self.release(run_id)

    def _forget_in_child(self) -> None:
        """In a forked child: close the child's copies of the lock files' descriptors,
        without unlocking (a ``flock`` goes with the last descriptor of its open file:
        the parent keeps the lock), and hold nothing. Else a child that outlives its
        parent — a ``multiprocessing`` fork worker — kept the run locked, and a resume
        was refused as written by the parent, dead."""
        for fd, _ in self._held.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._held.clear()
        self._owners.clear()


_live: weakref.WeakSet[RunLocks] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for locks in list(_live):
        locks._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
