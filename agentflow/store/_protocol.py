"""The interface every run store implements: :class:`Store`.

A store keeps a fleet's turn log so a killed run can resume. The SQLite backend
(:class:`~agentflow.store.SQLiteStore`) is the default; a server database (PostgreSQL)
implements the same protocol for fleets whose workers share one run across processes
and machines. What a backend must guarantee:

* **Writes never block the event loop.** :meth:`Store.write` is called on the hot path
  (a turn end, a tool result) and only enqueues; the backend writes in order, in
  batches, elsewhere (a thread, a connection's own task). Records of one run are
  committed in the order they were written: a tool result is never durable without its
  turn, nor a turn without the turns before it.
* **flush() means durable.** Once :meth:`Store.flush` returns, every record written
  before it is committed (for SQLite in WAL mode with ``synchronous=NORMAL``: it
  survives the process being killed; an operating-system crash may lose the last
  commits).
* **No duplicates, ever silently.** A turn is keyed ``(run, session, turn)`` and a tool
  result ``(run, session, call id)``; a second write of either key is a bug the
  backend keeps (:meth:`Store.conflicts`), not an overwrite.
* **One worker per session.** A session is resumed by whoever holds its lease:
  :meth:`Store.claim` takes the leases of free sessions (no holder, an expired lease,
  or — where the backend can tell — a holder whose process is gone), :meth:`Store.renew`
  extends them and says which were lost, :meth:`Store.release` gives them back. Expiry
  is on a clock every worker shares: the wall clock (``time.time_ns()``) for SQLite,
  whose workers share one machine; the database server's clock for PostgreSQL, so
  that machines with skewed clocks agree.
* **One number per attempt.** :meth:`Store.start_attempt` numbers a resumption
  atomically, so that two workers resuming one run at once get different numbers.
* **One run per id.** A backend shared by several processes may add ``async
  create_run(record)`` (not part of :class:`Store`: optional): a new run's
  :class:`~agentflow.store.RunStarted` recorded at once, its row made or found taken in
  one step (``ConfigError`` if taken), so two ``Fleet.run`` calls with one run id never
  both run it. Without it, the record is written as any other.
* **Secrets are not stored.** Records carry no endpoint credentials; backends must not
  add any (headers, URLs with user info).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agentflow._errors import ConfigError
from agentflow.store._records import Record, StoredRun, shortened

__all__ = ["LeaseOwner", "RunSummary", "Store", "session_ids"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseOwner:
    """Who holds a session's lease: a host, a process, and a token unique to one run
    of :meth:`Fleet.run` / :meth:`Fleet.resume` in it."""

    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.token}"

    @classmethod
    def parse(cls, text: str) -> LeaseOwner:
        """The owner :meth:`__str__` wrote (``host:pid:token``)."""
        host, pid, token = text.rsplit(":", 2)
        return cls(host=host, pid=int(pid), token=token)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """One line about a stored run (:meth:`Store.runs`)."""

    run_id: str
    status: str
    created_wall_ns: int
    sessions: int
    sessions_done: int
    turns: int
    attempts: int


@runtime_checkable
class Store(Protocol):
    """Where a fleet records its runs, and where resumption reads them from."""

    async def open(self) -> None:
        """Create or open the store (idempotent); raises :class:`~agentflow.StoreError`
        when it cannot, or when its schema version is not this agentflow's."""

    def write(self, record: Record) -> None:
        """Queue ``record``; never blocks, never raises for I/O (a write that later
        fails is raised by the next :meth:`flush`)."""

    async def flush(self) -> None:
        """Return once every record written so far is committed.

        Raises:
            StoreError: a write failed (the message names the record).
        """

    async def load(self, run_id: str, sessions: Sequence[str] | None = None) -> StoredRun:
        """Everything recorded about ``run_id`` (committed records only); with
        ``sessions``, only those sessions (and their turns) — the run, its attempts and
        agents are always whole.

        Raises:
            RunNotFound: there is no such run.
        """

    async def runs(self) -> list[RunSummary]:
        """Every stored run, newest first."""

    async def start_attempt(self, run_id: str, wall_ns: int, clock_ns: int) -> int:
        """Record a resumption of ``run_id`` (status ``running``) under the next free
        attempt number, atomically, and return that number; ``wall_ns`` and ``clock_ns``
        are one moment on the wall clock and on the fleet's clock (on virtual time,
        ``wall_ns`` is where the earlier attempts left the run's time line).

        Raises:
            RunNotFound: there is no such run.
        """

    async def claim(
        self, run_id: str, session_ids: Sequence[str], owner: LeaseOwner, ttl_s: float
    ) -> list[str]:
        """Take the leases of those of ``session_ids`` that are free (or already
        ``owner``'s) for ``ttl_s`` seconds; returns the ids now held by ``owner``."""

    async def renew(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> list[str]:
        """Extend every lease ``owner`` holds in the run; returns the session ids it
        still holds (a lease that expired and was taken by another is lost)."""

    async def release(
        self, run_id: str, owner: LeaseOwner, sessions: Sequence[str] | None = None
    ) -> None:
        """Give back every lease ``owner`` holds in the run (or those of ``sessions``),
        after every record written before the call is committed."""

    async def conflicts(self, run_id: str) -> list[str]:
        """Writes refused because their key was already recorded (should be empty)."""

    async def aclose(self) -> None:
        """Flush, then release the store's resources (idempotent)."""


def session_ids(sessions: object) -> list[str] | None:
    """:meth:`Store.load`'s ``sessions=`` as a list: ``None`` (the whole run), or the
    session ids of an iterable of strings — a string itself is refused (it would be read
    as one id per character, and silently match none).

    Raises:
        ConfigError: it is a string, not iterable, or holds something other than strings.
    """
    if sessions is None:
        return None
    if isinstance(sessions, str | bytes) or not isinstance(sessions, Iterable):
        raise ConfigError(
            "Store.load: sessions= must be a list of session ids (or None for the whole "
            f"run), got {type(sessions).__name__}"
            + (f" {shortened(str(sessions))!r}" if isinstance(sessions, str) else "")
        )
    ids = list(sessions)
    for sid in ids:
        if not isinstance(sid, str):
            raise ConfigError(
                f"Store.load: sessions= must hold session ids (strings), got {type(sid).__name__}"
            )
    return ids
