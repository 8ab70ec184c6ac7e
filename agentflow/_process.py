"""A local server in a child process: start it, wait for ``/health``, stop it for sure.

Shared by :class:`~agentflow.llamacpp.LlamaCppServer` and the simulator launcher
(:class:`~agentflow.embedded.SimProcess`). A child process keeps the server's CPU work
off the client's event loop (and, on a multi-core machine, off its core).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Sequence
from types import TracebackType

__all__ = ["ChildServer", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildServer:
    """Runs ``cmd`` and waits until ``http://127.0.0.1:PORT/health`` answers 200.

    Args:
        cmd: the command line; it must bind ``port`` on 127.0.0.1.
        port: the port the child binds.
        name: for error messages.
        startup_timeout_s: how long to wait for health.
    """

    def __init__(
        self, cmd: Sequence[str], *, port: int, name: str, startup_timeout_s: float = 120.0
    ) -> None:
        self.cmd = list(cmd)
        self.port = port
        self.name = name
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: list[str] = []
        self._drainer: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        """Start the child and wait for health.

        Raises:
            RuntimeError: the child exited, or was not healthy in time (its output is in
                the message).
        """
        self._proc = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            if _healthy(self.port):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"{self.name} not healthy after {self.startup_timeout_s} s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after 10 s) and close its pipe."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._drainer is not None:
            self._drainer.join(5)
        if proc.stdout is not None:
            proc.stdout.close()

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the child printed."""
        return "\n".join(self._log[-lines:])

    def _drain(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        for raw in proc.stdout:
            self._log.append(raw.decode("utf-8", "replace").rstrip())
            del self._log[:-500]

    def __enter__(self) -> ChildServer:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False
