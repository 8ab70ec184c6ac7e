"""A throwaway PostgreSQL server for tests: ``initdb`` into a temporary directory, start it
on loopback, hand out a DSN, and leave nothing behind.

Exposed as :class:`agentflow.testing.PostgresServer`. The server is a
:class:`~agentflow._process.ChildServer`, so it never outlives the process that started it:
stopped in order (SIGQUIT: PostgreSQL's immediate shutdown) by :meth:`PostgresServer.stop`
or at interpreter exit, and killed by the kernel (``PR_SET_PDEATHSIG``, Linux) when that
process is SIGKILLed. A killed process cannot remove its directory; the next
:meth:`PostgresServer.start` in the same temporary root removes every directory whose
owner process and server are both gone.

PostgreSQL refuses to run as root. As root the server runs as an unprivileged local user
(``postgres``, which Debian's package creates) and its directory is handed to that user;
as any other user it runs as that user.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from agentflow._errors import ConfigError
from agentflow._process import ChildServer, as_user, check_child_timeouts, free_port

__all__ = ["PostgresServer", "find_postgres"]

#: Where Debian and Ubuntu install each PostgreSQL major version (not on PATH).
DEBIAN_ROOT = Path("/usr/lib/postgresql")
_PREFIX = "agentflow-pg-"
_IPC_RMID = 0  # <sys/ipc.h>
_ROLE = "agentflow"
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_live: set[PostgresServer] = set()

#: Settings for a throwaway server: no durability against an OS crash (a killed client or
#: server process loses nothing committed: each commit's write-ahead log is written to the
#: OS before it is acknowledged, only not fsynced), small memory. (``synchronous_commit``
#: stays on: off, the last fraction of a second's commits were lost when a backend crashed.)
TEST_SETTINGS: Mapping[str, str] = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
}


def find_postgres(path: str | None = None, debian_root: Path = DEBIAN_ROOT) -> Path | None:
    """The directory holding ``initdb``, ``postgres`` and ``pg_ctl``, or ``None``.

    Looks on ``path`` (default ``$PATH``; symlinks are followed to the real directory), then
    in ``debian_root/*/bin``, newest major version first.
    """
    found = shutil.which("initdb", path=path)
    candidates = [Path(found).resolve().parent] if found else []
    if debian_root.is_dir():
        versions = [d for d in debian_root.iterdir() if d.name.isdigit()]
        candidates += [d / "bin" for d in sorted(versions, key=lambda d: -int(d.name))]
    return next((d for d in candidates if _has_binaries(d)), None)


def _has_binaries(bindir: Path) -> bool:
    return all(os.access(bindir / name, os.X_OK) for name in ("initdb", "postgres"))


class PostgresServer:
    """A PostgreSQL server of its own for a test session, on 127.0.0.1::

        with PostgresServer() as pg:
            conn = psycopg.connect(pg.dsn)

    The cluster is made by ``initdb`` in a new temporary directory, with one superuser
    ``agentflow`` whose password is random (scram-sha-256, also on the unix socket, which
    is in that directory). It runs without fsync (see :data:`TEST_SETTINGS`): fast, and
    nothing committed is lost when a client or the server is killed, only when the
    machine is.

    Args:
        port: the TCP port; 0 picks a free one.
        bindir: where ``initdb`` and ``postgres`` are; default :func:`find_postgres`.
        user: the local user the server runs as when this process is root (default
            ``postgres``); must be ``None`` otherwise.
        base_dir: where the temporary directory is made (default: the system's); as root
            it must be traversable by ``user``.
        settings: server settings (``-c name=value``) over :data:`TEST_SETTINGS`.
        startup_timeout_s: how long ``initdb`` and then the server may take to be ready.
        stop_timeout_s: how long :meth:`stop` waits before SIGKILL.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        bindir: str | os.PathLike[str] | None = None,
        user: str | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        settings: Mapping[str, str] | None = None,
        startup_timeout_s: float = 60.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.port = port
        self.bindir = None if bindir is None else Path(bindir)
        self.user = user
        self.base_dir = Path(base_dir if base_dir is not None else tempfile.gettempdir())
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        self.startup_timeout_s, self.stop_timeout_s = check_child_timeouts(
            startup_timeout_s, stop_timeout_s, "PostgresServer"
        )
        #: The temporary directory (cluster in ``data/``, unix socket in ``sock/``) while it runs.
        self.dir: Path | None = None
        self._password = secrets.token_urlsafe(24)
        self._child: ChildServer | None = None
        #: The process that started the server: only it stops it (see :meth:`stop`).
        self._owner = os.getpid()

    @property
    def dsn(self) -> str:
        """``postgresql://agentflow:PASSWORD@127.0.0.1:PORT/postgres``."""
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        """The DSN of another database on this server."""
        return f"postgresql://{_ROLE}:{self._password}@127.0.0.1:{self.port}/{database}"

    @property
    def pid(self) -> int | None:
        """The server's (postmaster's) process id while it runs; it leads its process group."""
        return None if self._child is None else self._child.pid

    def start(self) -> PostgresServer:
        """Make the cluster, start the server, and wait until it accepts connections.

        Raises:
            ConfigError: no PostgreSQL binaries, ``port`` is taken, no usable ``user``, or
                it is already running.
            RuntimeError: ``initdb`` failed, or the server exited or was not ready in time
                (the tail of its output is in the message).
        """
        if self._child is not None:
            raise ConfigError("start: this PostgresServer is already running")
        bindir = self.bindir or find_postgres()
        if bindir is None:
            raise ConfigError(
                "PostgreSQL not found: no initdb on PATH or in "
                f"{DEBIAN_ROOT}/*/bin (install Debian's postgresql package; scripts/setup does)"
            )
        if not _has_binaries(bindir):
            raise ConfigError(f"bindir: no initdb and postgres in {str(bindir)!r}")
        user = self._run_as()
        remove_stale(self.base_dir)
        self._owner = os.getpid()
        self.dir = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=self.base_dir))
        try:
            (self.dir / "owner").write_text(f"{os.getpid()} {_started(os.getpid())}\n")
            self._initdb(bindir, user)
            self.port = self.port or free_port()
            self._child = ChildServer(
                [str(bindir / "postgres"), "-D", str(self.dir / "data"), "-p", str(self.port)]
                + [f"-cunix_socket_directories={self.dir / 'sock'}"]
                + [f"-c{k}={v}" for k, v in self.settings.items()],
                port=self.port,
                name="PostgreSQL",
                startup_timeout_s=self.startup_timeout_s,
                stop_timeout_s=self.stop_timeout_s,
                ready=self._ready,
                stop_signal=signal.SIGQUIT,  # immediate shutdown: no checkpoint to wait for
                user=user,
                cwd=self.dir,
            )
            self._child.start()
        except BaseException:
            self.stop()
            raise
        _live.add(self)
        return self

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            if self.user is not None:
                raise ConfigError(f"user: running the server as {self.user!r} needs root")
            return None
        user = self.user or "postgres"
        try:
            as_user(user)
        except ConfigError:
            raise ConfigError(
                f"user: PostgreSQL refuses to run as root, and there is no local user {user!r} "
                "to run it as (Debian's postgresql package creates 'postgres')"
            ) from None
        return user

    def _initdb(self, bindir: Path, user: str | None) -> None:
        assert self.dir is not None
        pwfile = self.dir / "pwfile"
        pwfile.write_text(self._password + "\n")
        pwfile.chmod(0o600)
        (self.dir / "sock").mkdir(mode=0o700)
        if user is not None:
            for p in (self.dir, pwfile, self.dir / "sock"):
                shutil.chown(p, user, as_user(user)["group"])
        cmd = [str(bindir / "initdb"), "-D", str(self.dir / "data"), "-U", _ROLE]
        cmd += ["--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C"]
        cmd += ["--no-sync"]
        try:
            done = subprocess.run(
                cmd,
                cwd=self.dir,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=self.startup_timeout_s,
                check=False,
                **as_user(user),
            )
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(
                f"initdb did not finish in {self.startup_timeout_s} s:\n{_tail(e.stdout, e.stderr)}"
            ) from None
        finally:
            pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(
                f"initdb failed (exit {done.returncode}):\n{_tail(done.stdout, done.stderr)}"
            )

    def _ready(self) -> bool:
        """The postmaster says ``ready`` in ``postmaster.pid`` (as ``pg_ctl -w`` reads it),
        and its port accepts connections."""
        assert self.dir is not None
        try:
            lines = (self.dir / "data" / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        if len(lines) < 8 or lines[7].strip() != "ready" or lines[0].strip() != str(self.pid):
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def create_database(self, name: str) -> str:
        """Create database ``name`` (lowercase letters, digits, ``_``) and return its DSN.

        Raises:
            ConfigError: a bad name, or the server is not running.
            RuntimeError: ``createdb`` failed (its message is included).
        """
        if not _DB_NAME.fullmatch(name):
            raise ConfigError(f"name: {name!r} is not a plain database name ([a-z_][a-z0-9_]*)")
        if self._child is None:
            raise ConfigError("create_database: the server is not running (call start())")
        bindir = Path(self._child.cmd[0]).parent
        cmd = [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port)]
        cmd += ["-U", _ROLE, name]
        env = {**os.environ, "PGPASSWORD": self._password}
        done = subprocess.run(
            cmd, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=60, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"createdb {name} failed:\n{_tail(done.stdout, done.stderr)}")
        return self.dsn_for(name)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed."""
        return "" if self._child is None else self._child.log_tail(lines)

    def stop(self) -> None:
        """Stop the server (immediate shutdown, SIGKILL after ``stop_timeout_s``), reap it,
        and remove its directory. In a forked child of the process that started it, only
        forget it: the server and its directory are that process's."""
        _live.discard(self)
        if self._owner != os.getpid():
            self._child, self.dir = None, None
            return
        child, self._child = self._child, None
        if child is not None:
            child.stop()
        directory, self.dir = self.dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def remove_stale(base_dir: Path) -> list[Path]:
    """Remove the servers' directories in ``base_dir`` whose owner process and server are
    both gone (their owner was killed); return them. Linux only (reads ``/proc``)."""
    if not Path("/proc/self/stat").exists():
        return []
    removed = []
    for d in base_dir.glob(_PREFIX + "*"):
        try:
            owner, started = (d / "owner").read_text().split()
        except (OSError, ValueError):
            continue  # not ours to read, or being made right now
        if _started(int(owner)) == started:
            continue  # its owner still runs
        try:
            pidfile = (d / "data" / "postmaster.pid").read_text().splitlines()
        except OSError:
            pidfile = []  # no server was started, or it stopped and removed the file
        if pidfile and pidfile[0].strip().isdigit() and _started(int(pidfile[0])):
            continue  # its server still runs (a system without PR_SET_PDEATHSIG)
        if len(pidfile) > 6:
            _remove_segment(pidfile[6])
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(d)
    return removed


def _remove_segment(line: str) -> None:
    """Remove the killed server's System V shared memory segment (a few bytes, which only
    the server itself removes): ``line`` is ``postmaster.pid``'s "key shmid" line. Only
    a segment with that key and id and nothing attached is removed."""
    try:
        key, shmid = (int(f) for f in line.split())
        table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        libc = ctypes.CDLL(None, use_errno=True)
    except (OSError, ValueError):
        return
    for row in table:
        f = row.split()
        if int(f[0]) == key and int(f[1]) == shmid and int(f[6]) == 0:  # key shmid .. nattch
            libc.shmctl(ctypes.c_int(shmid), ctypes.c_int(_IPC_RMID), None)


def _started(pid: int) -> str:
    """When process ``pid`` started (clock ticks after boot), or ``""`` if it is gone or a
    zombie; with the pid, this names one process even after its pid is reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return ""
    return "" if fields[0] in ("Z", "X") else fields[19]


def _tail(*outputs: bytes | str | None, lines: int = 30) -> str:
    text = "".join(
        o.decode("utf-8", "replace") if isinstance(o, bytes) else o or "" for o in outputs
    )
    return "\n".join(text.splitlines()[-lines:])


@atexit.register  # registered after ChildServer's hook, so it runs first
def _stop_servers() -> None:
    for server in list(_live):
        with contextlib.suppress(Exception):
            server.stop()


def _forget_servers() -> None:
    """In a forked child: the servers running are the parent's (its exit must not stop
    them, nor remove their directories)."""
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_servers)
