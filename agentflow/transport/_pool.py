"""Kept-alive HTTP/1.1 connections to one host, for :class:`HTTPTransport`.

The pool has no limit of its own: how many requests run at once is the fleet's
decision, so :meth:`ConnectionPool.acquire` reuses an idle connection when there is
one and opens a new one otherwise. A connection goes back to the pool only when the
request on it ended cleanly; anything else (an error, a cancellation, a body the
client did not read to its end) closes it, so a half-read connection is never reused.
Idle connections are closed after ``keepalive_s`` by one timer per pool, not one per
connection.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from agentflow._errors import ConnectError, StreamTimeout
from agentflow.transport._kstamp import open_stamped

__all__ = ["ConnectionPool", "PooledConnection"]


class PooledConnection(asyncio.Protocol):
    """The pool's side of one connection; a subclass parses what arrives on it."""

    __slots__ = ("_lost", "idle_since", "pool", "reused", "rx_ns", "transport")

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self.pool: ConnectionPool[Any] = pool
        self.transport: asyncio.Transport | None = None
        #: Taken from the idle connections (it carried a whole response before), not new.
        self.reused = False
        #: When it last went idle (the loop's time), if it was ``reused``.
        self.idle_since = 0.0
        #: The kernel's arrival time of the read being delivered (on a
        #: :class:`~agentflow.transport._kstamp.StampedSocket`); 0 on asyncio's transports.
        self.rx_ns = 0
        # Resolved in connection_lost, so that aclose() can wait until sockets are shut.
        self._lost: asyncio.Future[None] = pool.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """asyncio: the socket is connected (and, for https, the TLS handshake done)."""
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio: the socket is closed, by either side; it leaves the pool for good."""
        self.transport = None
        self.pool.forget(self)
        if not self._lost.done():
            self._lost.set_result(None)

    @property
    def is_open(self) -> bool:
        """Whether the socket is connected and nobody has started to close it."""
        tr = self.transport
        return tr is not None and not tr.is_closing()

    def close(self) -> None:
        """Close gracefully (pending writes are flushed first)."""
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping whatever is buffered either way."""
        if self.transport is not None:
            self.transport.abort()


C = TypeVar("C", bound=PooledConnection)


class ConnectionPool(Generic[C]):
    """Connections to one ``host:port`` (TLS when ``ssl`` is given), reused LIFO.

    Args:
        factory: builds the protocol object of a new connection.
        host: the host to connect to.
        port: the TCP port.
        endpoint: the base URL, for error messages.
        ssl: a TLS context for https, else ``None``.
        server_hostname: the name TLS checks the certificate against.
        connect_timeout: seconds allowed for one ``create_connection`` (DNS, TCP, TLS).
        keepalive_s: an idle connection older than this is closed.
        stamp_clock: open plain-TCP connections whose reads the kernel stamps
            (:class:`~agentflow.transport._kstamp.StampedSocket`), converted to this clock;
            ``None`` uses asyncio's own transports.
    """

    def __init__(
        self,
        factory: Callable[[ConnectionPool[C]], C],
        host: str,
        port: int,
        *,
        endpoint: str,
        ssl: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout: float | None = None,
        keepalive_s: float = 15.0,
        stamp_clock: Callable[[], int] | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self._stamp_clock = stamp_clock
        self._factory = factory
        self._host = host
        self._port = port
        self._endpoint = endpoint
        self._ssl = ssl
        self._server_hostname = server_hostname if ssl is not None else None
        self._connect_timeout = connect_timeout
        self._keepalive_s = keepalive_s
        # Idle connections → when each went idle. A dict keeps release order, so the
        # first item is the oldest (for the sweep) and popitem() the newest (for reuse:
        # the connection least likely to have been closed by the server meanwhile).
        self._idle: dict[C, float] = {}
        self._all: set[C] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        #: Connections opened so far.
        self.opened = 0

    @property
    def size(self) -> int:
        """Open connections, idle or in use."""
        return len(self._all)

    @property
    def idle(self) -> int:
        """Idle connections ready for reuse."""
        return len(self._idle)

    async def acquire(self, *, fresh: bool = False) -> C:
        """An idle connection if there is one (and not ``fresh``), else a new one.

        Raises:
            ConnectError: the connection could not be opened.
            StreamTimeout: ``phase="connect"``, it took longer than ``connect_timeout``.
        """
        idle = self._idle
        while idle and not fresh:
            conn, since = idle.popitem()
            if conn.is_open:
                conn.reused = True
                conn.idle_since = since
                return conn
        return await self._connect()

    async def _connect(self) -> C:
        scope = asyncio.timeout(self._connect_timeout)
        try:
            async with scope:
                if self._stamp_clock is not None:
                    _, stamped = await open_stamped(
                        lambda: self._factory(self), self._host, self._port, clock=self._stamp_clock
                    )
                    conn = cast(C, stamped)
                else:
                    _, conn = await self.loop.create_connection(
                        lambda: self._factory(self),
                        self._host,
                        self._port,
                        ssl=self._ssl,
                        server_hostname=self._server_hostname,
                    )
        except TimeoutError as exc:
            # An OSError(ETIMEDOUT) from the kernel is a TimeoutError too: only our own
            # limit running out is the connect phase's StreamTimeout.
            if scope.expired():
                raise StreamTimeout(
                    f"{self._endpoint}: no connection within {self._connect_timeout} s "
                    "(connect limit)",
                    phase="connect",
                    timeout_s=self._connect_timeout or 0.0,
                    endpoint=self._endpoint,
                ) from None
            raise self._connect_error(exc) from exc
        except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError is an OSError)
            raise self._connect_error(exc) from exc
        self._all.add(conn)
        self.opened += 1
        return conn

    def _connect_error(self, exc: BaseException) -> ConnectError:
        return ConnectError(
            f"no response from {self._endpoint}: {type(exc).__name__}: {exc}",
            endpoint=self._endpoint,
        )

    def release(self, conn: C) -> None:
        """Take back a connection whose last response was read to its end."""
        if not conn.is_open:
            return
        self._idle[conn] = self.loop.time()
        if self._sweeper is None:
            self._sweeper = self.loop.call_later(self._keepalive_s, self._sweep)

    def drop_idle(self, *, since: float) -> None:
        """Close the idle connections that went idle at ``since`` or before: a connection
        idle since then was found closed by the server, so they likely are too."""
        idle = self._idle
        for conn, when in list(idle.items()):
            if when > since:
                break  # the rest went idle later (the dict keeps release order)
            del idle[conn]
            conn.close()

    def forget(self, conn: C) -> None:
        """Drop a closed connection from the books (called from ``connection_lost``)."""
        self._idle.pop(conn, None)
        self._all.discard(conn)

    def _sweep(self) -> None:
        # A connection expires at ``since + keepalive_s``, the very sum its timer was set
        # for: ``since > now - keepalive_s`` could round the other way, and the timer then
        # came back at the same instant for ever (on a virtual-time loop, whose clock does
        # not move while a timer is due).
        self._sweeper = None
        now, idle = self.loop.time(), self._idle
        for conn, since in list(idle.items()):
            expires = since + self._keepalive_s
            if expires > now:
                # The rest went idle later: come back when this one expires.
                self._sweeper = self.loop.call_at(expires, self._sweep)
                return
            del idle[conn]
            conn.close()

    async def aclose(self) -> None:
        """Close every connection, idle or in use; requests still on one then fail."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        conns = list(self._all)
        self._idle.clear()
        for conn in conns:
            conn.close()
        waiting = [c._lost for c in conns if not c._lost.done()]
        if waiting:
            # Let connection_lost run, so no socket outlives aclose() (a TLS close may
            # wait for the peer: do not hang on it).
            await asyncio.wait(waiting, timeout=1.0)
        for conn in conns:
            # The transport itself, not conn.abort(): a request still on the connection
            # must be failed by connection_lost, not abandoned.
            if conn.transport is not None:
                conn.transport.abort()
