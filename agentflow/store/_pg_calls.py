""":class:`~agentflow.store.PostgresStore`'s reads and lease calls, and what they add to a
call of its writer thread (``store/_writer.py``): refused while records written before it are
held, not committed (it would not see them); tried once more on a new connection when
the store's idle one was found lost; and a loaded run's tool results keyed by the ids
their calls have (a NUL, which ``TEXT`` keeps as U+FFFD), and each session's
``ended_attempt`` (PostgreSQL's own column)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from agentflow._errors import ConfigError, RunNotFound, StoreError
from agentflow._logging import get_logger
from agentflow._seconds import check_lease_ttl
from agentflow.store import _pg_io as io
from agentflow.store._pg_writer import PgWriter
from agentflow.store._protocol import LeaseOwner, RunSummary, session_ids
from agentflow.store._records import RunStarted, StoredRun
from agentflow.store._sqlite_io import list_runs, read_run

__all__ = ["PgCalls", "nul_call_ids"]

_log = get_logger("agentflow.store")
T = TypeVar("T")
Conn = Any  # psycopg.Connection, imported lazily (the ``pg`` extra)


class PgCalls(PgWriter):
    """The calls' side of :class:`~agentflow.store.PostgresStore` (see the module). The
    store sets ``_keepers`` (an empty set)."""

    _keepers: set[asyncio.Task[None]]

    def _hand_over(self) -> None:
        """Give the writer thread the loop's batch — under ``_lock``, once per batch: a
        failed first connection drains the queue under it and puts its records back
        (``PostgresStore._open_failed``), and a batch handed over in between landed ahead
        of those older records."""
        with self._lock:
            super()._hand_over()

    def _keep_until_closed(self, task: asyncio.Task[None]) -> None:
        """Hold ``task`` — renewing the leases a refused release kept (records wait to be
        committed) until their release goes through: ``LeaseKeeper.release`` — and cancel
        it as the store closes (:meth:`_stop_keepers`). It used to run on, learning of the
        close only at its next tick, to renew on the closed store and log a failure."""
        self._keepers.add(task)
        task.add_done_callback(self._keepers.discard)

    def _stop_keepers(self) -> None:
        """Cancel the lease-renewing tasks (the store is closing)."""
        for task in list(self._keepers):
            loop = task.get_loop()
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if loop is running:
                task.cancel()
            else:
                with contextlib.suppress(RuntimeError):  # (its loop is closed)
                    loop.call_soon_threadsafe(task.cancel)

    async def _read(self, fn: Callable[[Conn], T], refused: str) -> T:
        """``fn`` (a read, or a claim, which reads the sessions' rows) run after what was
        written before, as every call is — and refused while some of that waits to be
        committed (:meth:`_refuse_while_held`): it would not see it. (It answered without
        it, silently, where a flush would have raised.)"""

        def read(conn: Conn) -> T:
            self._refuse_while_held(refused)
            return fn(conn)

        return await self._call(self._again(read))

    def _again(self, fn: Callable[[Conn], T]) -> Callable[[Conn], T]:
        """``fn``, an idempotent call (a read, a claim by its owner, a renewal, a
        release), tried once more on a new connection when it failed because the
        store's was lost — an idle connection's loss (a server restart, an idle-session
        timeout, an administrator) is only found by the next statement: the next
        ``Fleet.run`` failed at once, with the server up (commits already rode such a
        loss out). Not for ``start_attempt`` or ``create_run``: done twice, they
        would not answer the same."""

        def once_more(conn: Conn) -> T:
            try:
                return fn(conn)
            except Exception:
                fresh = self._usable(conn) if conn.closed else conn
                if fresh is conn:
                    raise
                _log.warning("store.call_again", store=self._where)
                return fn(fresh)

        return once_more

    def _refuse_while_held(self, refused: str) -> None:
        """On the writer thread: a :class:`StoreError` (``refused``: what is not done) if
        records written before are held, not committed."""
        if self._pending:
            raise StoreError(
                f"{self._where}: {refused}: {len(self._pending)} record(s) written before "
                f"are not committed yet ({self._pending_error})"
            )

    async def load(self, run_id: str, sessions: Sequence[str] | None = None) -> StoredRun:
        """Everything recorded about ``run_id`` (or only its ``sessions``), from one
        snapshot; :class:`RunNotFound` if nothing is.

        Raises:
            StoreError: records written before wait to be committed (the server refused
                their batch, or cannot be reached): the answer would not hold them.
        """
        only = session_ids(sessions)

        def read(conn: Conn) -> StoredRun:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                run = read_run(io.Qmark(conn), run_id, self._where, only)
                if self._stamp_ends:  # (PostgreSQL's own column: SQLite's reader lacks it)
                    ended = _ended_attempts(conn, run_id, only)
                    for s in run.sessions:  # -1: its end is from before the column
                        s.ended_attempt = ended.get(s.session_id, -1)
                return run

        return nul_call_ids(await self._read(read, f"run {run_id!r} not read"))

    async def declared_sessions(self, run_id: str) -> int:
        """How many sessions ``run_id`` was created with (``create_run`` commits the run's
        row at once, its sessions in the batches that follow); :class:`RunNotFound` if
        it is not in the store."""

        def read(conn: Conn) -> int:
            row = conn.execute("SELECT sessions FROM runs WHERE run_id = %s", (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(run_id, self._where)
            return int(row[0])

        return await self._read(read, f"run {run_id!r} not read")

    # --- reads and leases (on the writer thread, after what was written before) ---------

    async def runs(self) -> list[RunSummary]:
        """Every stored run, newest first (a :class:`StoreError` while records written
        before wait to be committed, as :meth:`load`)."""
        return await self._read(lambda conn: list_runs(io.Qmark(conn)), "runs not listed")

    async def create_run(self, record: RunStarted) -> None:
        """Record a new run's start (``record``: attempt 0) now, after what was written
        before: its row is made, or found taken, in one statement — two workers starting
        one run id at once do not both get it (``Fleet.run`` checked with a load, then
        wrote: both passed, and both ran every session).

        Raises:
            ConfigError: the run id is already in the store.
        """
        if record.attempt != 0:
            raise ValueError(f"create_run takes a run's first attempt, got {record.attempt}")
        if not await self._call(lambda conn: io.create_run(conn, record)):
            raise ConfigError(
                f"run_id {record.run_id!r} is already in {self!r}; resume it with Fleet.resume"
            )

    async def start_attempt(self, run_id: str, wall_ns: int, clock_ns: int) -> int:
        """Record the next attempt at ``run_id`` and return its number."""
        return await self._call(
            lambda conn: io.start_attempt(conn, run_id, wall_ns, clock_ns, self._where)
        )

    async def claim(
        self, run_id: str, session_ids: Sequence[str], owner: LeaseOwner, ttl_s: float
    ) -> list[str]:
        """Take the free leases among ``session_ids`` for ``ttl_s`` seconds (on the
        server's clock). Free: nobody holds it, it expired, or it is ``owner``'s. A
        :class:`StoreError` while records written before wait to be committed (a session
        whose start waits would not be found), as :meth:`load`."""
        check_lease_ttl(ttl_s, "PostgresStore.claim: ttl_s")
        ids, me = list(session_ids), str(owner)

        def take(conn: Conn) -> list[str]:
            got = io.claim(conn, run_id, ids, me, ttl_s)
            self._holders.update(((run_id, sid), me) for sid in got)
            return got

        return await self._read(take, f"sessions of run {run_id!r} not claimed")

    async def renew(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> list[str]:
        """Extend ``owner``'s leases in the run; returns the session ids it still holds.

        It does not wait for the records written before it to be committed, nor for a
        held batch to be tried again (either may wait out ``statement_timeout_s``, past
        the leases' expiry): only for a commit already under way (``docs/store-postgres.md``).
        """
        check_lease_ttl(ttl_s, "PostgresStore.renew: ttl_s")
        me = str(owner)
        return await self._call(
            self._again(lambda conn: io.renew(conn, run_id, me, ttl_s)), unordered=True
        )

    async def release(
        self, run_id: str, owner: LeaseOwner, sessions: Sequence[str] | None = None
    ) -> None:
        """Give back every lease ``owner`` holds in the run (or those of ``sessions``),
        after every record written before is committed.

        Raises:
            StoreError: records written before wait to be committed (the server cannot
                be reached, or refused them): the leases are kept — given back, another
                worker would run those sessions again without them.
        """
        me, ids = str(owner), None if sessions is None else list(sessions)

        def give(conn: Conn) -> None:
            self._refuse_while_held(f"leases of run {run_id!r} kept")
            io.release(conn, run_id, me, ids)
            for key in [k for k, v in self._holders.items() if v == me and k[0] == run_id]:
                if ids is None or key[1] in ids:
                    del self._holders[key]

        await self._call(self._again(give))

    async def conflicts(self, run_id: str) -> list[str]:
        """Writes refused because their key was already recorded, or because their
        session's lease was no longer this store's (``fenced …``): ``kind key`` lines (a
        :class:`StoreError` while records written before wait to be committed, as
        :meth:`load`)."""

        def read(conn: Conn) -> list[str]:
            rows = conn.execute(
                "SELECT kind, key FROM conflicts WHERE run_id = %s ORDER BY wall_ns", (run_id,)
            ).fetchall()
            return [f"{k} {key}" for k, key in rows]

        return await self._read(read, f"conflicts of run {run_id!r} not read")


def _ended_attempts(conn: Conn, run_id: str, only: list[str] | None) -> dict[str, int]:
    """``sessions.ended_attempt`` of the run's sessions (those of ``only``) that have one."""
    query = "SELECT session_id, ended_attempt FROM sessions WHERE run_id = %s"
    query += " AND ended_attempt IS NOT NULL"
    params: tuple[Any, ...] = (run_id,)
    if only is not None:
        query += " AND session_id = ANY(%s)"
        params += (only,)
    return {str(sid): int(n) for sid, n in conn.execute(query, params)}


def nul_call_ids(run: StoredRun) -> StoredRun:
    """``run`` with each tool result keyed by its call's id as the turn's trace has it.
    A NUL in a call's id is kept as U+FFFD in ``tool_calls.call_id`` (``TEXT`` cannot
    hold it) and as itself in the trace (JSON): the result no longer matched its call,
    and a resume failed ("no recorded result") or ran the tool again."""
    for s in run.sessions:
        for t in s.turns:
            calls = t.trace.tool_calls
            for c in calls:
                if "\x00" not in c.id or c.id in t.tool_results:
                    continue
                stored = c.id.replace("\x00", "\ufffd")  # as _pg_io._t stored it
                if any(other.id == stored for other in calls):
                    continue  # (that id's own: never taken for another's)
                kept = t.tool_results.pop(stored, None)
                if kept is not None:
                    t.tool_results[c.id] = replace(kept, call_id=c.id)
    return run
