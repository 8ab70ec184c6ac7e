"""The run store on PostgreSQL, for workers on several machines sharing one run.

Why a thread with a synchronous psycopg connection rather than psycopg's async one: the
event loop's share of a record is then a list append (and a count: `max_held`), as with SQLite.
An async connection would cost the loop a task wakeup per statement, compete with the
fleet's streams for it, and — on a :class:`~agentflow.embedded.VirtualTimeLoop` — let
virtual time jump past lease renewals while a query is out. The writer thread wakes
once per batch (``batch_interval_s`` after its first record), sends it as one pipeline
in one transaction (one round trip, not one per statement) and commits once; libpq
releases the GIL while it waits for the server.

Everything that touches the database — writes, reads, lease changes — runs on that
thread in the order it was asked for: a read sees every record written before it, or —
while some of them wait to be committed (the server refused their batch, or cannot be
reached) — raises a :class:`StoreError` saying so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentflow._errors import StoreError
from agentflow._logging import get_logger
from agentflow._redact import redact
from agentflow._threads import thread_result
from agentflow.store import _pg_conn
from agentflow.store import _pg_io as io
from agentflow.store._closing import wait_through_cancel
from agentflow.store._pg_calls import PgCalls
from agentflow.store._pg_conn import Watchdog, check_settings, connect, split_dsn
from agentflow.store._pg_schema import check_pg_schema, ended_attempts
from agentflow.store._pg_writer import MAX_HELD
from agentflow.store._writer import STOP, BatchWriter, Call

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

_log = get_logger("agentflow.store")
T = TypeVar("T")
Conn = Any  # psycopg.Connection, imported lazily (the ``pg`` extra)
#: Seconds between two tries at a new connection once the store's is lost.
RECONNECT_EVERY_S = 1.0


class PostgresStore(PgCalls):
    """A run store in a PostgreSQL database (schema: ``docs/store.md``).

    The DSN is a libpq connection string (``postgresql://USER@HOST/DB`` or
    ``host=… dbname=…``); libpq's environment variables and ``~/.pgpass`` apply. Its
    password and its SSL key's passphrase (``sslpassword``), if it has them, are never
    stored: not in the database, not on this object (``dsn`` is the DSN without them),
    not in any message (they are registered with agentflow's redaction). Lease expiry
    is compared on the database server's clock.

    Args:
        dsn: where the database is.
        schema: the PostgreSQL schema (namespace) the tables live in; created if missing.
        batch_interval_s: how long the writer gathers records before one commit.
        max_batch: records that make the writer commit at once, interval or not.
        connect_timeout_s: how long connecting may take.
        statement_timeout_s: how long one statement may wait (locks included).
        max_held: turns and tool results that may wait to be committed — held in
            memory, in order, while the server cannot be reached or refuses them; once
            that many wait, ``write`` refuses the next with
            :class:`~agentflow.StoreBacklogFull` instead of holding more (default
            100,000). A run's and a session's start and end are always taken.

    Raises:
        ConfigError: psycopg is not installed (``pip install 'agentflow[pg]'``), the DSN
            cannot be parsed — or is a URL whose user name or password holds a ``/`` or
            an ``@`` not percent-encoded (libpq would read part of the password as the
            host, port or database) —, or a value is out of range.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "agentflow",
        batch_interval_s: float = 0.010,
        max_batch: int = 1024,
        connect_timeout_s: float = 30.0,
        statement_timeout_s: float = 60.0,
        max_held: int = MAX_HELD,
    ) -> None:
        #: The DSN without its password and SSL key passphrase (they live only in the
        #: connection).
        self.dsn, self._hidden = split_dsn(dsn, self)
        check_settings(
            schema, batch_interval_s, max_batch, connect_timeout_s, statement_timeout_s, max_held
        )
        self.schema = schema
        self.batch_interval_s = batch_interval_s
        self.max_batch = max_batch
        self.connect_timeout_s = connect_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self.max_held = max_held
        self._where = redact(f"PostgreSQL {self.dsn} (schema {schema})")
        self._init_writer()
        self._init_commits()
        # Cuts the connection of a call or commit the server no longer answers.
        self._watchdog = Watchdog(statement_timeout_s + _pg_conn.WATCHDOG_MARGIN_S, self._where)
        # (run, session) -> the lease owner this store claimed it for (writer thread only)
        self._holders: dict[tuple[str, str], str] = {}
        # Tasks renewing the leases a refused release kept (_keep_until_closed).
        self._keepers: set[asyncio.Task[None]] = set()
        # Writer thread only: the connection (a new one once it is lost: _usable), and
        # when the next reconnection may be tried.
        self._conn: Conn = None
        self._reconnect_at = 0.0

    def __repr__(self) -> str:
        return redact(f"PostgresStore({self.dsn!r}, schema={self.schema!r})")

    # --- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, create the schema and tables or check their version; start the writer.
        An open store's connection is checked (one ``SELECT 1``), and replaced if it was
        lost while idle: what follows an open — ``Fleet.run``'s ``create_run``,
        ``Fleet.resume``'s ``start_attempt`` — is not tried twice (done twice, neither
        would answer the same), so the next ``Fleet.run`` without a run id failed at once
        after a server restart or an idle-session timeout, with the server up.

        Raises:
            StoreError: the server cannot be reached or refuses the login, or the store
                holds another schema version.
        """
        self._start()
        await self._call(self._again(_ping))

    def _start(self) -> None:
        with self._lock:
            self._start_locked()

    def _start_for_write(self) -> None:
        """A write starts the writer thread only at the first use: after a first
        connection failed, its records wait (in order) for the next ``open()``, call or
        ``aclose()``. (Each write started a thread that failed to connect and ended, and
        with it a new watchdog: 200 writes to a server down started 400 threads.)"""
        with self._lock:
            if self._thread is None and not self._ended.done():
                self._start_locked()

    def _start_locked(self) -> None:
        """Start the writer thread if none runs (under ``_lock``): at the first use, and
        again after a first connection failed (:meth:`_open_failed`)."""
        if self._closed:
            raise self._closed_error()  # (if its writer failed: why)
        if self._thread is None:
            if self._ended.done():  # (a thread whose first connection failed)
                self._ended = concurrent.futures.Future()
            self._thread = threading.Thread(
                target=self._main, args=(self._ended,), name="agentflow-store:pg", daemon=True
            )
            self._thread.start()
            self._watchdog.start()

    async def aclose(self) -> None:
        """Commit what is queued, close the connection (idempotent).

        Cancelled meanwhile (a SIGTERM cancels a command's main task), it still waits
        for the writer's closing call — at most ``statement_timeout_s`` + 60 s, which
        the watchdog's cut of a silent server keeps it within — then raises the
        cancellation: what was queued is committed, not left to a thread racing the
        process's exit.

        A store whose first connection failed connects once more to commit the records
        written since, if any; so does one whose connection was lost with records held —
        at once, even within the second after a failed try (:meth:`_usable`): a server
        back from a restart used to find them dropped, untried.

        Raises:
            StoreError: the writer did not close within that time; or records were not
                written (that connection failed too: it says how many).
        """
        self._stop_keepers()
        stop: Call[Conn] = _Reconnect(self._watchdog.wrap(self._stop), stop=True)
        with self._lock:  # (a failed first connection's _open_failed takes it too)
            if self._thread is None and not self._closed and self._records_queued():
                # Written since a first connection failed: one more try at committing
                # them — should it fail too, the closing call says they were not written
                # (they used to be dropped without a word).
                self._start_locked()
            closing_idle = self._thread is None or self._closed
            self._closed = True
            if not closing_idle:
                BatchWriter._hand_over(self)  # what was written so far goes first
                self._queue.put(stop)
        if closing_idle:
            self._watchdog.stop()
            await self._wait_failed_writer(self.statement_timeout_s)
            return
        self._urgent.set()
        try:
            await wait_through_cancel(thread_result(stop.future), self.statement_timeout_s + 60)
        except TimeoutError:
            raise StoreError(f"{self._where}: the writer did not close in time") from None
        # What the thread has left to do is close a socket: the loop waits without
        # blocking (it used to join the thread, which was dropping the marker then).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(thread_result(self._ended), self.statement_timeout_s)
        self._report()

    def _records_queued(self) -> bool:
        """Whether records wait for a writer thread (under ``_lock``, none running)."""
        return bool(self._batch) or not self._queue.empty()

    def _stop(self, conn: Conn) -> object:
        """The closing call: drop this store's commit marker (a stale row is harmless);
        records still held are lost — the close says how many (:meth:`_drop_held`)."""
        if not conn.closed:
            with contextlib.suppress(Exception):
                io.drop_marker(conn, self._marker)
        self._drop_held()
        return STOP

    async def flush(self) -> None:
        """Return once every record written before the call is committed. With the
        connection lost and records held, it tries a new connection at once (each try
        bounded by ``connect_timeout_s``), not only once a second (:meth:`_usable`).

        Raises:
            StoreError: an earlier batch failed to commit (until one succeeds), or —
                :class:`RecordsLeftOut` — records were left out since the last flush
                that said so (each loss is reported once).
        """
        await self._call(_nothing, reconnect=True)
        self._report()

    async def _call(
        self, fn: Callable[[Conn], T], *, unordered: bool = False, reconnect: bool = False
    ) -> T:
        kind = _Reconnect if reconnect else Call
        call: Call[Conn] = kind(self._watchdog.wrap(fn), unordered=unordered)
        self._hand_over()
        # The thread started and the call queued under one lock: a thread whose first
        # connection fails fails the calls queued by then and leaves (_open_failed), and a
        # call queued after that starts the next thread.
        with self._lock:
            self._start_locked()
            self._queue.put(call)
        self._urgent.set()
        result: T = await thread_result(call.future)
        return result

    # --- the writer thread ------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        conn = connect(self.dsn, self._hidden, self.connect_timeout_s, self.statement_timeout_s)
        self._watchdog.watch(conn)  # (until the call or commit that connected is done)
        try:
            check_pg_schema(conn, self.schema, self._where)
            self._stamp_ends = ended_attempts(conn, self.schema, self._where)
        except BaseException:
            conn.close()
            raise
        return conn

    def _main(self, ended: concurrent.futures.Future[None]) -> None:
        try:
            self._conn = self._connect()
        except Exception as exc:
            self._open_failed(exc, ended)
            return
        try:
            self._watchdog.idle()
            try:
                self._loop(self._conn)
            finally:
                self._conn.close()
        finally:
            self._watchdog.stop()
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                ended.set_result(None)

    def _run_batch(self, conn: Conn, batch: list[Any]) -> bool:
        if any(type(item) is _Reconnect for item in batch):
            self._reconnect_at = 0.0  # a flush or the close: one more try, at once
        return super()._run_batch(conn, batch)

    def _usable(self, conn: Conn) -> Conn:
        """The store's connection, or — once it is lost (the server restarted, the network
        dropped it, an administrator ended it) — a new one, tried at most once a
        second after the last try ended (a try that times out takes
        ``connect_timeout_s``), but at once for a flush or the close; while none can be
        made, the lost one (what uses it fails, and a commit keeps its batch for the
        next one: :meth:`_commit`)."""
        current = self._conn
        if not current.closed:
            return current
        if time.monotonic() < self._reconnect_at:
            return current
        try:
            self._conn = self._connect()
        except Exception as exc:
            self._reconnect_at = time.monotonic() + RECONNECT_EVERY_S
            self._reconnect_failed = redact(f"{type(exc).__name__}: {exc}")
            _log.warning("store.reconnect_failed", store=self._where, error=str(exc))
            return current
        self._reconnect_failed = None
        _log.warning("store.reconnected", store=self._where)
        return self._conn


class _Reconnect(Call[Conn]):
    """A flush, or the closing call: the batch that carries it tries a new connection at
    once if the store's is lost, whenever the last try was. (Within a second of a failed
    try, a close dropped the records held — a server back from a restart or crash
    recovery found no try at all.)"""

    __slots__ = ()


def _nothing(conn: Conn) -> None:
    """A flush's call: nothing but waiting for what was written before."""


def _ping(conn: Conn) -> None:
    """One round trip on ``conn`` (it fails if the connection was lost)."""
    conn.execute("SELECT 1")
