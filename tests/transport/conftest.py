"""What the transport tests share: a server that outlives their event loops."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator

import pytest

from .rawserver import SSE_BODY


class _Answer(socketserver.StreamRequestHandler):
    """One request, answered with a whole stream, then the connection closed (so no
    connection is left idle in a pool when a loop ends)."""

    def handle(self) -> None:
        length = 0
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        self.rfile.read(length)
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(SSE_BODY)
            + SSE_BODY
        )


@pytest.fixture
def thread_server() -> Iterator[str]:
    """A base URL served from a thread: it outlives the tests' event loops."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Answer) as srv:
        srv.daemon_threads = True
        thread = threading.Thread(target=srv.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
        finally:
            srv.shutdown()
            thread.join()
