"""Reads stamped by the kernel: when bytes reached the socket, not when the loop got to them.

A per-read timestamp taken in ``data_received`` is the time the event loop *ran* the
read. When the loop is busy — hundreds of streams each delivering a chunk in the same
engine step, a slow callback, a garbage collection — every chunk waiting behind the
others is stamped late, and TTFT, ITL and TPOT come out inflated by the client's own
lag. Linux can stamp each packet as it arrives (``SO_TIMESTAMPNS``) and hand the stamp
over with the data through ``recvmsg``; asyncio's transports call ``recv`` and drop it.

:class:`StampedSocket` is the smallest transport that keeps it: a non-blocking TCP
socket read with ``recvmsg`` from ``loop.add_reader`` (the selector loop or uvloop),
written with ``send`` and ``add_writer``. Each read sets ``protocol.rx_ns``, the
arrival time on the caller's clock, before ``protocol.data_received(data)``. It is
plain TCP only (TLS needs asyncio's SSL transport) and Linux only.

For TCP the kernel reports the stamp of the *last* packet a read consumed: when the
client lags so far behind one stream that several of its events arrive before it reads,
they share the latest stamp — still never later than the read itself.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["SUPPORTED", "StampedProtocol", "StampedSocket", "open_stamped"]

#: Whether this platform can stamp reads in the kernel (Linux; ``recvmsg``'s ancillary
#: data needs ``socket.CMSG_SPACE``, which Windows' socket module lacks).
SUPPORTED = sys.platform.startswith("linux") and hasattr(socket, "CMSG_SPACE")

# <asm-generic/socket.h>: SO_TIMESTAMPNS_OLD, and the control message type it produces.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux: tv_sec, tv_nsec
# Not at import where unsupported: agentflow.transport must import on Windows too.
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if SUPPORTED else 0
_READ_SIZE = 256 * 1024
# How far apart two clock readings around a real-time one may be (ns), and how many tries.
_BRACKET_NS = 20_000
_TRIES = 4


def _converted(stamp_ns: int, clock: Callable[[], int]) -> int:
    """A ``CLOCK_REALTIME`` stamp on ``clock``: now on ``clock``, less the stamp's age on the
    real-time clock (the same on any clock). Both clocks are read back to back, bracketed
    by two readings of ``clock`` (taking their middle): a pause between them (the process
    descheduled) would make the stamp early by that much, so a bracket wider than
    ``_BRACKET_NS`` is read again (up to ``_TRIES`` times; the narrowest is kept)."""
    realtime = time.time_ns
    a = clock()
    rt = realtime()
    b = clock()
    width, now, tries = b - a, (a + b) // 2, 1
    while width > _BRACKET_NS and tries < _TRIES:
        tries += 1
        a = clock()
        r = realtime()
        b = clock()
        if b - a < width:
            width, now, rt = b - a, (a + b) // 2, r
    age = rt - stamp_ns
    return now - age if age > 0 else now


class StampedProtocol(Protocol):
    """What :class:`StampedSocket` feeds: an ``asyncio.Protocol`` with an ``rx_ns`` slot."""

    rx_ns: int

    def connection_made(self, transport: Any) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class StampedSocket(asyncio.Transport):
    """A plain-TCP transport whose reads carry the kernel's arrival time.

    Args:
        loop: the running loop (its ``add_reader`` / ``add_writer`` drive the socket).
        sock: a connected, non-blocking TCP socket; the transport owns it from now on.
        protocol: receives ``connection_made``, ``data_received`` and ``connection_lost``.
        clock: the nanosecond clock of the traces; stamps are converted to it.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: StampedProtocol,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock: socket.socket | None = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._clock = clock
        self._out = bytearray()
        self._closing = False
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._on_readable)

    # -- reading -------------------------------------------------------------------------

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            data, ancdata, _flags, _addr = sock.recvmsg(_READ_SIZE, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._teardown(exc)
            return
        if not data:  # the peer closed its side: HTTP/1.1 has no use for a half-open socket
            self._teardown(None)
            return
        self._protocol.rx_ns = self._arrival(ancdata)
        self._protocol.data_received(data)

    def _arrival(self, ancdata: list[tuple[int, int, bytes]]) -> int:
        """The kernel's stamp of this read, on ``clock``; the clock itself if there is none."""
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                sec, nsec = _TIMESPEC.unpack_from(payload)
                return _converted(sec * 1_000_000_000 + nsec, self._clock)
        return self._clock()

    # -- writing -------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data``; what the socket does not take now goes when it is writable."""
        sock = self._sock
        if sock is None or self._closing:
            return
        if not self._out:
            try:
                sent = sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._teardown(exc)
                return
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._on_writable)
        self._out += data

    def _on_writable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            sent = sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._teardown(exc)
            return
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._teardown(None)

    def get_write_buffer_size(self) -> int:
        """Bytes written but not yet taken by the socket."""
        return len(self._out)

    # -- closing -------------------------------------------------------------------------

    def is_closing(self) -> bool:
        """Whether ``close`` or ``abort`` has been called (or the socket has closed)."""
        return self._closing or self._sock is None

    def close(self) -> None:
        """Close once what was written has been sent."""
        if self._sock is None or self._closing:
            return
        self._closing = True
        if not self._out:
            self._teardown(None)

    def abort(self) -> None:
        """Close now, dropping anything not yet sent."""
        self._teardown(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """``socket``, ``sockname`` and ``peername``, as asyncio's transports give them."""
        sock = self._sock
        if sock is None:
            return default
        if name == "socket":
            return sock
        if name == "sockname":
            return sock.getsockname()
        if name == "peername":
            return sock.getpeername()
        return default

    def _teardown(self, exc: Exception | None) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        self._closing = True
        self._out.clear()
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        sock.close()
        # As asyncio does: the protocol hears of it on the next loop iteration.
        self._loop.call_soon(self._protocol.connection_lost, exc)


async def open_stamped(
    protocol_factory: Callable[[], StampedProtocol],
    host: str,
    port: int,
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> tuple[StampedSocket, StampedProtocol]:
    """Connect over TCP like ``loop.create_connection``, with kernel-stamped reads.

    Raises:
        OSError: as ``create_connection`` would (refused, unreachable, DNS).
    """
    loop = asyncio.get_running_loop()
    try:  # an IP address needs no resolver: no trip through the executor's threads
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"getaddrinfo({host!r}, {port}) returned nothing")
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        protocol = protocol_factory()
        return StampedSocket(loop, sock, protocol, clock), protocol
    assert last is not None
    raise last
