"""A local server in a child process: start it, wait for ``/health``, stop it for sure.

Shared by :class:`~agentflow.llamacpp.LlamaCppServer`, ``agentflow demo`` (the simulator
in a child) and the benchmarks. A child process keeps the server's CPU work off the
client's event loop (and, on a multi-core machine, off its core).

The child must not outlive its parent, however the parent ends:

- **The parent stops it** (:meth:`ChildServer.stop`, the context manager's exit): SIGTERM
  to the child's process group, SIGKILL after ``stop_timeout_s`` (or at once when that
  wait is interrupted: a second Ctrl-C never leaves the child running). The ``agentflow``
  commands turn SIGTERM into the same orderly exit as Ctrl-C, so SIGTERM reaches the
  child this way.
- **The parent is killed** (``kill -9``, an OOM kill, a crash): on Linux the child is
  started with ``PR_SET_PDEATHSIG`` (``prctl``, through :mod:`ctypes`, in the fork's
  ``preexec_fn``), so the kernel sends it ``death_signal`` (SIGKILL by default) when the
  parent dies. The kernel ties this to the parent *thread* that forked, so it is armed
  only when :meth:`ChildServer.start` runs on the main thread; started from another
  thread the child would die with that thread, and instead relies on the two other ways.
  Other systems have no such call: there a killed parent leaves the child running
  (stop it with ``kill -- -PGID``: it leads its own process group).
- **The interpreter exits** with children still running: an :mod:`atexit` hook stops them.

Each child leads a new session (``start_new_session``), hence its own process group:
Ctrl-C at a terminal reaches only the parent, which stops the run in order (and, in
``agentflow demo``, writes the partial report) before it stops the child; and stopping the
group also stops anything the child started.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from agentflow._cliargs import check_listen
from agentflow._errors import ConfigError, ServerStartError
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds

__all__ = ["ChildServer", "as_user", "check_child_timeouts", "free_port", "kill_children"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_running: set[ChildServer] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildServer:
    """Runs ``cmd`` and waits until ``http://127.0.0.1:PORT/health`` answers 200 (or until
    ``ready()`` is true).

    Args:
        cmd: the command line; it must bind ``port`` on 127.0.0.1.
        port: the port the child binds; it must be free when :meth:`start` is called
            (else the health check could be answered by another server).
        name: for error messages.
        startup_timeout_s: how long to wait for health (seconds, finite, > 0).
        stop_timeout_s: how long :meth:`stop` waits after SIGTERM before SIGKILL (seconds,
            finite, ≥ 0).
        death_signal: what the kernel sends the child if this process dies first
            (Linux, when started from the main thread; see the module's docstring);
            default SIGKILL (SIGTERM where there is none: Windows).
        ready: when the child is ready, for servers without ``/health`` (polled every
            0.1 s until ``startup_timeout_s``); the default asks ``/health``.
        stop_signal: what :meth:`stop` sends the process group first.
        user: run the child as this local user (its primary group, no other groups;
            needs root): for servers that refuse to run as root, as PostgreSQL does.
            The death signal still holds: it is armed after the switch.
        cwd: the child's working directory.

    Raises:
        ConfigError: a timeout is not a finite number of seconds in range (before
            anything is started).
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        port: int,
        name: str,
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float = 10.0,
        death_signal: signal.Signals | None = None,
        ready: Callable[[], bool] | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
        user: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.cmd = list(cmd)
        self.port = port
        self.name = name
        self.startup_timeout_s, self.stop_timeout_s = check_child_timeouts(
            startup_timeout_s, stop_timeout_s, "ChildServer"
        )
        # Resolved here, not as the default: Windows' signal module has no SIGKILL, and
        # the default would be evaluated when this module (imported by agentflow.testing)
        # is imported.
        self.death_signal: signal.Signals = (
            death_signal if death_signal is not None else getattr(signal, "SIGKILL", signal.SIGTERM)
        )
        self.ready = ready
        self.stop_signal = stop_signal
        self.user = user
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: list[str] = []
        self._drainer: threading.Thread | None = None
        #: The process that started the child: only it may stop it (a forked child of
        #: that process inherits this object, not the child process).
        self._owner = os.getpid()
        #: Whether the kernel will signal the child when this process dies.
        self.dies_with_parent = False

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs (also its process group's id); ``None``
        once it has exited (it is then reaped: :attr:`returncode` says how it ended), or
        when it was never started or was stopped. In a process forked from the one that
        started it, which cannot wait for it, the child as that process last knew it."""
        proc = self._proc
        return None if proc is None or self._poll(proc) is not None else proc.pid

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has exited by itself (negative: killed by that
        signal), ``None`` while it runs or when it was never started or was stopped."""
        return None if self._proc is None else self._poll(self._proc)

    def _poll(self, proc: subprocess.Popen[bytes]) -> int | None:
        # Only the starting process can wait for the child: in a forked one, poll() gets
        # ECHILD, and Popen records an exit status of 0 for a child that still runs.
        return proc.poll() if self._owns() else proc.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait until the child exits by itself (it crashed, or was killed from outside)
        and return its exit status, with all its output in :meth:`log_tail`; ``None`` when
        ``timeout`` passed first, or when it is not running (or this process did not start
        it: a forked one cannot wait for it). Ctrl-C (and SIGTERM in the
        ``agentflow`` commands) interrupts the wait."""
        proc = self._proc
        if proc is None:
            return None
        if not self._owns():  # (a forked process cannot wait: see _poll)
            return proc.returncode
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._drainer is not None and self._drainer.ident is not None:
            self._drainer.join(5)  # the rest of its output, up to its pipe's end
        return code

    def start(self) -> None:
        """Start the child and wait for health.

        Raises:
            ConfigError: ``port`` is not free on 127.0.0.1.
            ServerStartError: the child exited, or was not healthy in time (its output's
                last lines are in the message); also a ``RuntimeError``.
        """
        check_listen("127.0.0.1", self.port, what=f"{self.name}: port")
        self._owner = os.getpid()
        arm = _pdeathsig(self.death_signal)
        self.dies_with_parent = arm is not None
        self._proc = subprocess.Popen(
            self.cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.cwd,
            preexec_fn=arm,  # only prctl and getppid run between fork and exec
            **as_user(self.user),
        )
        try:
            _running.add(self)
            self._drainer = threading.Thread(target=self._drain, daemon=True)
            self._drainer.start()
            problem = self._wait_healthy(self._proc)
        except BaseException:  # interrupted meanwhile (Ctrl-C, or SIGTERM in the CLI)
            self.stop()
            raise
        if problem:
            code = self._proc.poll()
            self.stop()  # its output is all in the log once it is stopped
            raise ServerStartError(
                f"{self.name} {problem}; the last lines of its output:\n{self.log_tail()}",
                server=self.name,
                exitcode=code,
            )

    def _wait_healthy(self, proc: subprocess.Popen[bytes]) -> str:
        """``""`` once healthy, else what went wrong."""
        deadline = time.monotonic() + self.startup_timeout_s
        ready = self.ready or (lambda: _healthy(self.port))
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return "exited at start"
            if ready():
                return ""
            time.sleep(0.1)
        return f"not healthy after {self.startup_timeout_s} s"

    def stop(self) -> None:
        """Stop the child: ``stop_signal`` (SIGTERM) to its process group, SIGKILL after
        ``stop_timeout_s``, or at once if the wait is interrupted (a second Ctrl-C: the
        interrupt is raised again once the child is gone)."""
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None or not self._owns():
            return
        if proc.poll() is None:  # not reaped yet, so its group id cannot have been reused
            _signal_group(proc, self.stop_signal)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            except BaseException:  # interrupted while waiting (a second Ctrl-C): no orphan
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
                self._close(proc)
                raise
        self._close(proc)

    def kill(self) -> None:
        """Kill the child's process group at once (SIGKILL) and reap it."""
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None or not self._owns():
            return
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        self._close(proc)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the child printed."""
        return "\n".join(self._log[-lines:])

    def _owns(self) -> bool:
        """Whether this process started the child. A forked child of the process that
        did (``os.fork``, a ``multiprocessing`` fork worker) must leave it alone: the
        child is not its own to signal or reap, and the pipe's reader lock may be held
        by the parent's drainer thread, which did not come with the fork (closing it
        hung the forked child's exit)."""
        return os.getpid() == self._owner

    def _close(self, proc: subprocess.Popen[bytes]) -> None:
        if self._drainer is not None and self._drainer.ident is not None:  # it was started
            self._drainer.join(5)
        if proc.stdout is not None:
            proc.stdout.close()

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


def check_child_timeouts(startup_s: object, stop_s: object, owner: str) -> tuple[float, float]:
    """``(startup_s, stop_s)`` as a child server's timeouts: a finite number of seconds,
    over 0 to start (up to :data:`~agentflow._seconds.MAX_TIMEOUT_S`), 0 or more to stop.

    Raises:
        ConfigError: naming ``owner.startup_timeout_s`` or ``owner.stop_timeout_s``.
    """
    return (
        check_seconds(startup_s, f"{owner}.startup_timeout_s", 0.001, MAX_TIMEOUT_S),
        check_seconds(stop_s, f"{owner}.stop_timeout_s", 0.0, MAX_TIMEOUT_S),
    )


def as_user(user: str | None) -> dict[str, Any]:
    """:class:`subprocess.Popen` arguments that run the child as local ``user`` (its
    primary group, no supplementary groups), or none for ``None``.

    Raises:
        ConfigError: no such user.
    """
    if user is None:
        return {}
    import pwd  # POSIX only

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise ConfigError(f"user: no local user {user!r}") from None
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def kill_children() -> None:
    """SIGKILL every child this process started and has not stopped (for a forced exit)."""
    for child in list(_running):
        child.kill()


@atexit.register
def _stop_children() -> None:
    for child in list(_running):
        child.stop()


def _forget_children() -> None:
    """In a forked child: the children running are the parent's, not this process's."""
    _running.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_children)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the child's process group (it leads it), else the child alone."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError, AttributeError):  # no killpg on Windows
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def _pdeathsig(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks the kernel for ``sig`` when this process dies, or
    ``None`` where that cannot work: not Linux, or not the main thread (the kernel
    signals when the forking *thread* ends, and another thread may end any time)."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent, signum = os.getpid(), int(sig)

    def arm() -> None:  # in the child, between fork and exec
        prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os.kill(os.getpid(), signum)

    return arm


#: Opens loopback URLs directly: ``urlopen`` would send them to ``$http_proxy``, and a
#: child that is up would never be seen as healthy.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(port: int) -> bool:
    try:
        with _DIRECT.open(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False
