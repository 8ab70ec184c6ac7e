"""A TCP proxy in front of the test server that can cut the network silently: from
:meth:`Proxy.cut` on, what either side sends is dropped (nothing is reset, nothing
answers), as in a network partition; :meth:`Proxy.heal` lets new connections through."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """127.0.0.1:``port`` → 127.0.0.1:``target`` (``port``: a free one unless given)."""

    def __init__(self, target: int, port: int = 0) -> None:
        self.target = target
        self._cut = threading.Event()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen()
        self.port = int(self._listener.getsockname()[1])
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, name="pg-proxy", daemon=True).start()

    def dsn(self, dsn: str) -> str:
        """``dsn`` (a URL of the server on ``target``) through the proxy."""
        return dsn.replace(f":{self.target}/", f":{self.port}/")

    def cut(self) -> None:
        """Drop everything, on every connection, from now on."""
        self._cut.set()

    def heal(self) -> None:
        """Connections made from now on work; those open during the cut are ended, both
        ways (shut down first: a socket closed while a thread waits in ``recv`` on it
        stays open, and the server's end would stay idle in its transaction, its locks
        held)."""
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        self._socks.clear()
        self._cut.clear()

    def close(self) -> None:
        self.heal()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            dead = self._cut.is_set()
            self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b, dead), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, dead: bool) -> None:
        try:
            while data := a.recv(65536):
                if dead or self._cut.is_set():
                    dead = True  # a connection that met the cut never carries data again
                    continue
                b.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)
