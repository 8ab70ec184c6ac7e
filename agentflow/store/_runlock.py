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
keeps it until the attempt's lease owner has given its leases back (the attempt ended), or
the store closes. One attempt at a time through the store, too: a second attempt at a
run while one through the same store still writes it (a second ``start_attempt``, or a
claim by another lease owner) is a ``StoreError`` as well — the leases would not split
the sessions between them (a lease of this process whose owner is live is not free, but
two attempts would still both record the run). The kernel drops
the lock when the process dies, ``kill -9`` included, so a killed run is resumed at
once. The lock file is made with ``O_EXCL``, or opened without following a symbolic link
and truncated only if it is a regular file of one link — owned by this user where others
can write the directory: someone who can write the directory cannot have a run lock
overwrite another file with a pid (a ``StoreError`` names the path instead). A filesystem
that refuses ``flock`` (``ENOLCK``: NFS without lockd) is a ``StoreError`` naming the lock
file (left in place: another process may hold it). Where there is no ``flock`` (Windows),
no run lock is taken: one writer per run is then the user's to keep. Workers that share a run need
:class:`~agentflow.store.PostgresStore`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import sys
import weakref
from pathlib import Path

from agentflow._errors import StoreError

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no run lock there, as documented
    fcntl = None  # type: ignore[assignment]

__all__ = ["RunLocks", "live_owner"]

#: How a lock file is opened: never through a symbolic link (its target would be
#: truncated), never blocking (a FIFO planted there), not inherited by child processes.
_SAFE_OPEN = (
    getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
)


class RunLocks:
    """The run locks one store holds (by run id)."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._held: dict[str, tuple[int, Path]] = {}
        #: The lease owner of the attempt writing each run through this store.
        self._owners: dict[str, str] = {}
        #: Runs whose attempt started here (``start_attempt``) and has not claimed yet.
        self._starting: set[str] = set()
        _live.add(self)

    def path(self, run_id: str) -> Path:
        """The lock file of ``run_id``."""
        digest = hashlib.blake2b(run_id.encode("utf-8", "surrogatepass"), digest_size=8)
        return self.db.with_name(f"{self.db.name}.af-run-{digest.hexdigest()}.lock")

    def begin(self, run_id: str) -> None:
        """An attempt at ``run_id`` starts through this store (``start_attempt``): hold
        the run's lock; its first claim's owner is then the attempt's.

        Raises:
            StoreError: another attempt through this store, another live process or
                another open store writes the run.
        """
        self._refuse_second(run_id)
        if run_id not in self._held and fcntl is not None:
            self._lock(run_id)
        self._starting.add(run_id)

    def acquire(self, run_id: str, owner: object) -> None:
        """Hold ``run_id``'s lock (no-op if this store holds it already) for ``owner``
        (a lease owner, claiming): the lock is kept until it lets go.

        Raises:
            StoreError: another attempt through this store (another lease owner),
                another live process or another open store writes the run.
        """
        me = str(owner)
        if self._owners.get(run_id) == me:
            return
        if run_id not in self._starting:
            self._refuse_second(run_id)
        if run_id not in self._held and fcntl is not None:
            self._lock(run_id)
        # Only once the lock is held: a refused owner holds nothing.
        self._starting.discard(run_id)
        self._owners[run_id] = me
        _live_owners.add(me)

    def _refuse_second(self, run_id: str) -> None:
        if run_id in self._starting or run_id in self._owners:
            raise StoreError(
                f"{self.db}: run {run_id!r} is being written by another attempt through this "
                "store (a Fleet.run or Fleet.resume of it that has not ended); a SQLite store "
                "has one writer per run — wait for it to end, or share the run between "
                "workers with PostgresStore"
            )

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
            while True:
                try:  # made here: ours, whatever owner the filesystem reports (NFS squash)
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _SAFE_OPEN, 0o600)
                    made = True
                    break
                except FileExistsError:  # a lock another run holds, or a killed one left
                    pass
                try:
                    fd = os.open(path, os.O_RDWR | _SAFE_OPEN)
                    made = False
                    break
                except FileNotFoundError:  # its holder let go between the two: make it
                    continue
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW: a symbolic link
                raise StoreError(self._not_ours(path, "a symbolic link")) from exc
            raise StoreError(f"{self.db}: cannot create the run lock {path}: {exc}") from exc
        try:
            if not made:
                self._check_ours(fd, path)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            error = self._held_elsewhere(run_id, fd)
            os.close(fd)
            raise error from None
        except OSError as exc:  # ENOLCK, EOPNOTSUPP: the filesystem refuses flock
            # (The file stays even if made here: another process may have opened and
            # locked it since — removing it would let a third take the run beside that
            # one. A lock file nobody holds is a stale one, taken by the next store.)
            os.close(fd)
            raise self._no_flock(path, exc) from exc
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _no_flock(self, path: Path, exc: OSError) -> StoreError:
        return StoreError(
            f"{self.db}: cannot lock the run lock {path}: {exc.strerror or exc} — a filesystem "
            "without flock (NFS without lockd, some FUSE or SMB mounts)? A SQLite store needs "
            "one that locks: put it on a local disk, or use PostgresStore"
        )

    def _check_ours(self, fd: int, path: Path) -> None:
        """Raise a :class:`StoreError` unless ``fd``, a lock file found there, is one a
        store makes: a regular file of one link — it is truncated and written — and, in a
        directory others can write (where anyone could have planted it), this user's. In
        the user's own directory a lock another user's killed run left (root resuming a
        user's run) is taken, as before."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(self._not_ours(path, "not a regular file"))
        if st.st_nlink > 1:
            raise StoreError(self._not_ours(path, f"a file of {st.st_nlink} hard links"))
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid() and _shared(path.parent):
            raise StoreError(self._not_ours(path, f"owned by another user (uid {st.st_uid})"))

    def _not_ours(self, path: Path, what: str) -> str:
        return (
            f"{self.db}: the run lock {path} is {what}, not a lock file a store made; "
            "refusing to write it (it would overwrite what it names) — remove it, and "
            "check who can write that directory"
        )

    def refuse_if_held(self, run_id: str) -> None:
        """Raise the :class:`StoreError` :meth:`acquire` would if another live process
        holds ``run_id``'s lock — only a look, no lock taken (``agentflow resume`` asks
        before it starts the simulator child). No lock file, or one no process holds,
        is no live writer; without ``flock`` there is no run lock to look at."""
        if sys.platform == "win32":  # (no fcntl)
            return
        try:
            # Not through a link, nor blocking on a FIFO: the run itself refuses those.
            fd = os.open(self.path(run_id), os.O_RDONLY | _SAFE_OPEN)
        except OSError:  # none (or not readable, or a link: the run itself will say so)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # let go of as fd is closed
        except BlockingIOError:
            raise self._held_elsewhere(run_id, fd) from None
        except OSError as exc:  # as the run itself would say: the filesystem refuses flock
            raise self._no_flock(self.path(run_id), exc) from exc
        finally:
            os.close(fd)

    def _held_elsewhere(self, run_id: str, fd: int) -> StoreError:
        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
        return StoreError(
            f"{self.db}: run {run_id!r} is being written by another live process "
            f"(pid {holder}); a SQLite store has one writer per run — wait for it to "
            "end (or stop it), or share the run between workers with PostgresStore"
        )

    def release(self, run_id: str, owner: object = None) -> None:
        """``owner`` let go of the run (the attempt ended; one that never claimed ends an
        attempt that started without claiming); with ``owner=None``, whatever holds it.
        Then let go of ``run_id``'s lock, if held (the file is removed)."""
        held_by = self._owners.get(run_id)
        if owner is not None and held_by is not None and held_by != str(owner):
            return  # not the attempt that writes the run
        if held_by is not None:
            _live_owners.discard(held_by)
        self._owners.pop(run_id, None)
        self._starting.discard(run_id)
        held = self._held.pop(run_id, None)
        if held is None:
            return
        fd, path = held
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)

    def release_all(self) -> None:
        """Let go of every lock this store holds."""
        for run_id in {*self._held, *self._owners, *self._starting}:
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
        self._starting.clear()


_live: weakref.WeakSet[RunLocks] = weakref.WeakSet()
#: The lease owners (``str(LeaseOwner)``) of the attempts live in this process, whatever
#: their store: a lease one of them holds is not free (``_sqlite_io``), though its pid is
#: this process's.
_live_owners: set[str] = set()


def live_owner(holder: str) -> bool:
    """Whether ``holder`` (a lease's owner) is a live attempt of this process."""
    return holder in _live_owners


def _after_fork_in_child() -> None:
    for locks in list(_live):
        locks._forget_in_child()
    _live_owners.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _shared(directory: Path) -> bool:
    """Whether users other than its owner can make files in ``directory`` (group or
    world writable, a sticky ``/tmp`` included); one that cannot be read is taken as
    shared."""
    try:
        mode = directory.stat().st_mode
    except OSError:
        return True
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH))
