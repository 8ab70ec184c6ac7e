"""``TurnTrace.sent_ns`` is when the request was written, after its connection was opened:
connecting (TCP, TLS) is not the server's time, and counted in neither TTFT nor E2E.

The server here holds the client's connection back, as a server whose accept queue is
full does: the kernel drops the client's SYN until the server has made room (by taking
the connection waiting before it), so the connection cannot be complete — nor the
request written — before the server's own clock reading when it made that room. It
makes that room only once the transport has read its clock for the first time (the
stream has begun), so a ``sent_ns`` read before connecting is always before it. The
order of the readings (one clock, ``time.perf_counter_ns``, on both sides) is the
test; no duration is, and no sleep decides it.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import aclosing

import pytest

from .rawserver import SSE_OK, TINY_REQUEST, make_transport

GUARD_S = 60.0  # a hang guard only


class _FullQueueServer:
    """A loopback server whose accept queue (of one) is taken by a connection of its own
    until, on its thread, it notes the time (``room_ns``) and accepts that one; then it
    accepts the client's and answers one request."""

    def __init__(self) -> None:
        #: Set by the transport's first clock reading: the stream has begun.
        self.began = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.port = self._sock.getsockname()[1]
        # Fills the queue: later SYNs are dropped (and retried by the client's kernel).
        self._filler = socket.create_connection(("127.0.0.1", self.port))
        self.room_ns = 0
        self.got_request = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.began.wait(GUARD_S)
        self.room_ns = time.perf_counter_ns()
        filler, _ = self._sock.accept()
        conn, _ = self._sock.accept()
        with conn, filler:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            self.got_request.set()
            conn.sendall(SSE_OK)
            conn.recv(1)  # until the client closes

    def clock(self) -> int:
        """The transport's clock: ``perf_counter_ns``, noting that the stream began."""
        self.began.set()
        return time.perf_counter_ns()

    def close(self) -> None:
        self._filler.close()
        self._sock.close()
        self._thread.join(timeout=5)


@pytest.mark.parametrize("kind", ["protocol", "aiohttp"])
async def test_sent_ns_is_taken_after_the_connection_is_open(kind: str) -> None:
    """It was taken before connecting: here, before the server had made room for the
    connection, so TTFT counted a SYN retransmission (about a second on Linux)."""
    srv = _FullQueueServer()
    try:
        url = f"http://127.0.0.1:{srv.port}/v1"
        async with aclosing(make_transport(kind, url, clock=srv.clock)) as t:
            trace = await t.stream(TINY_REQUEST)
    finally:
        srv.close()
    assert srv.got_request.is_set() and trace.content == "fine"
    assert srv.room_ns < trace.sent_ns <= trace.headers_ns <= trace.chunk_ns[0]
