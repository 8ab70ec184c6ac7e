"""Checks the ``agentflow`` commands run on their arguments before any work starts.

A bad value must cost the user one line naming it (``agentflow sim: error: --port 99999
…``, exit status 2, as :mod:`argparse` does for its own errors), not a traceback, and
not a failure at the end of a long run: where a command will listen, it checks the
address can be bound; where it will write, it checks the path can be written — both
before it starts. Failed checks raise :class:`~agentflow.ConfigError`; :func:`fail`
prints one in the ``argparse`` style.

Stdlib only (plus the error tree), so the simulator's CLI can use it without importing
the client side.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import ipaddress
import math
import os
import socket
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._files import fd_writable, own_fd, through_name
from agentflow._session_checks import is_header_name

__all__ = [
    "OneLineParser",
    "at_least",
    "check_listen",
    "check_no_overwrite",
    "check_output_dir",
    "check_output_file",
    "fail",
    "header_name",
    "non_empty",
    "non_negative",
    "port",
    "same_file",
    "store_inputs",
]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``PROG: error: …``, exit 2),
    without the usage block; ``--help`` still prints it. Its subparsers are of this
    class too."""

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def port(text: str) -> int:
    """``argparse`` type of a TCP port: an integer in 0–65535 (0: pick a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0–65535, got {value}")
    return value


def non_negative(text: str) -> float:
    """An ``argparse`` type: a finite number ≥ 0 (``nan`` and ``inf`` parse as floats,
    but no server takes them: JSON has no such numbers)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number ≥ 0, got {text}")
    return value


def positive(text: str) -> float:
    """An ``argparse`` type: a finite number > 0 (a duration, a factor)."""
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def at_least(low: int) -> Callable[[str], int]:
    """An ``argparse`` type: a whole number ≥ ``low``, refused naming the flag (argparse
    prefixes ``argument --FLAG:``), not the field it goes to."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        try:
            return check_count(value, "the value", low)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("the value ")) from None

    return whole_number


def non_empty(text: str) -> str:
    """An ``argparse`` type: any text but ``""`` (a model name)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def header_name(text: str) -> str:
    """An ``argparse`` type: an HTTP header name (a token: no spaces, no ``:``), or ``""``
    where the flag documents what none means."""
    if text and not is_header_name(text):
        raise argparse.ArgumentTypeError(f"not an HTTP header name: {text!r}")
    return text


def fail(prog: str, error: BaseException | str) -> int:
    """Print ``PROG: error: MESSAGE`` on one line to stderr; returns exit status 2.

    A leading ``"CMD: "`` that repeats the command's last word is dropped from the
    message (several modules prefix their :class:`ConfigError` messages that way).
    """
    message = " ".join(str(error).split())  # one line, whatever the message held
    command = prog.split()[-1]
    message = message.removeprefix(f"{command}: ")
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def check_listen(host: str, port: int, *, what: str = "--port", host_flag: str = "--host") -> None:
    """Raise :class:`ConfigError` unless a server could listen on ``host:port`` now.

    ``host`` must be an IP address or a name that resolves; the port is then bound
    (and released) on every address ``host`` resolves to, with ``SO_REUSEADDR`` as
    asyncio and aiohttp bind, so a port another server listens on is reported as in
    use while one left in ``TIME_WAIT`` is not. Port 0 checks only the host. Addresses
    this machine cannot have (``::1`` without IPv6) are skipped when another binds, as
    the servers themselves skip them.

    Args:
        host: the address to bind.
        port: the port, 0–65535.
        what, host_flag: how messages name the port and the host.
    """
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{what} must be 0–65535, got {port!r}")
    skipped: OSError | None = None
    bound = 0
    for family, kind, proto, address in _resolve(host, port, host_flag):
        # As asyncio's create_server does: an address family this machine lacks (no
        # IPv6 for ``localhost``'s ::1) is skipped, as long as some address binds.
        try:
            s = socket.socket(family, kind, proto)
        except OSError as exc:
            skipped = skipped or exc
            continue
        with s:
            if os.name == "posix":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL:
                    raise ConfigError(_bind_message(exc, host, port, what, host_flag)) from None
                skipped = skipped or exc
                continue
        bound += 1
    if not bound and skipped is not None:
        raise ConfigError(_bind_message(skipped, host, port, what, host_flag))


def check_output_file(path: Path, flag: str) -> None:
    """Raise :class:`ConfigError` unless ``path`` can be written.

    Missing parent directories are created (the commands create them when they write).
    An existing file is opened for appending, which changes nothing in it, and without
    blocking: a FIFO with no reader (which would block the opening until one came, before
    any work) is refused; a new file (a dangling link's target) is created and removed
    again. A regular file (or a new one) is written through a temporary file next to it
    (:func:`~agentflow._files.open_text_output`), so a file is also made and removed in
    its directory: a directory that takes no new entries (not writable by this user,
    immutable, ``/proc``) is refused here, before the run, not when the run is over.
    """
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory")
    fd = own_fd(path)
    if fd is not None and not fd_writable(fd):
        raise ConfigError(f"{flag} {path}: this process's descriptor {fd} is open for reading only")
    _make_dir(path.parent, f"{flag} {path}")
    try:
        if path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NONBLOCK", 0)))
        else:
            new = path.resolve()  # a dangling link: the file it names is the one written
            _make_dir(new.parent, f"{flag} {path}")
            _make_and_remove(new)
    except OSError as exc:
        if exc.errno == errno.ENXIO and _is_fifo(path):
            raise ConfigError(
                f"{flag} {path}: a FIFO with no reader (it would wait for one forever): "
                "start its reader first"
            ) from None
        raise ConfigError(f"{flag} {path}: cannot write: {_reason(exc)}") from None
    if (path.exists() and not path.is_file()) or fd is not None:
        return  # a device, a FIFO, this process's descriptor: written directly
    new = path.resolve()  # a link: the file it names is the one written
    _make_dir(new.parent, f"{flag} {path}")
    try:
        _make_and_remove(through_name(new))  # the very name the writing will need room for
    except OSError as exc:
        raise ConfigError(
            f"{flag} {path}: cannot write: no new file can be made in {new.parent} "
            f"(the file is written through one): {_reason(exc)}"
        ) from None


def _make_and_remove(path: Path) -> None:
    """Make ``path`` (a new file) and remove it, whatever happens between (a Ctrl-C); a
    file found there (made meanwhile by someone else) is left alone."""
    existed = False
    try:
        path.open("xb").close()
    except FileExistsError:
        existed = True
        raise
    finally:
        if not existed:  # (made, or perhaps made before a Ctrl-C in open: removed)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def check_store_file(path: Path, command: str) -> None:
    """Raise :class:`ConfigError` unless ``path`` can be a store to read: a file, not an
    empty one (opening that would make it a new, empty store — a command that only reads
    must not write; a store's file has its first page as soon as it is made, or its
    ``-wal`` file holds them)."""
    if not path.is_file():
        raise ConfigError(f"{command}: --store {str(path)!r} is not a file")
    wal = path.with_name(path.name + "-wal")
    if path.stat().st_size == 0 and not (wal.is_file() and wal.stat().st_size > 0):
        raise ConfigError(f"{command}: --store {str(path)!r} is empty: no agentflow store")


def same_file(a: Path, b: Path) -> bool:
    """Whether paths ``a`` and ``b`` name one file (through links and ``..`` too)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): then they differ
        return False


def store_inputs(path: Path, flag: str = "--store") -> list[tuple[str, Path]]:
    """A SQLite store as the inputs :func:`check_no_overwrite` guards: its file and the
    ``-wal`` and ``-shm`` files SQLite keeps beside it (writing over either loses runs as
    surely as writing over the store)."""
    label = f"{flag} {path}"
    return [
        (label, path),
        *((f"the {s} file of {label}", path.with_name(path.name + s)) for s in ("-wal", "-shm")),
    ]


def check_no_overwrite(
    outputs: Sequence[tuple[str, Path]], inputs: Sequence[tuple[str, Path]]
) -> None:
    """Raise :class:`ConfigError` if an output would overwrite an input or another output.

    ``agentflow report run.json --html run.json`` or ``agentflow trace export --store
    runs.db RUN -o runs.db`` (slips) would replace what was measured with what was made
    from it; a command calls this before it writes anything.

    Args:
        outputs: ``(flag, path)`` of each file the command will write.
        inputs: ``(label, path)`` of each file it reads; the label names it in the
            message (``"--store runs.db"``, ``"the report run.json"``; see
            :func:`store_inputs`).
    """
    for i, (flag, out) in enumerate(outputs):
        for label, path in inputs:
            if same_file(out, path):
                raise ConfigError(f"{flag} {out} is {label}: writing it would overwrite the input")
        for other, earlier in outputs[:i]:
            if same_file(out, earlier):
                raise ConfigError(f"{flag} {out} and {other} {earlier} are the same file")


def check_output_dir(path: Path, flag: str) -> None:
    """Raise :class:`ConfigError` unless files can be written in directory ``path``
    (created with its parents if missing)."""
    _make_dir(path, f"{flag} {path}")
    probe = path / f".agentflow-write-check-{os.getpid()}"
    try:
        with probe.open("xb"):
            pass
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write in it: {_reason(exc)}") from None


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        return False


def _make_dir(directory: Path, label: str) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"{label}: {_first_non_dir(directory)} is not a directory") from None
    except OSError as exc:
        raise ConfigError(f"{label}: cannot create {directory}: {_reason(exc)}") from None


def _first_non_dir(directory: Path) -> Path:
    """The ancestor of ``directory`` (or itself) that exists and is not a directory."""
    for p in reversed((directory, *directory.parents)):
        if p.exists() and not p.is_dir():
            return p
    return directory


def _resolve(host: str, port: int, flag: str) -> list[tuple[int, int, int, tuple[Any, ...]]]:
    name = host.strip("[]")
    if not name:
        raise ConfigError(f"{flag} must be an address or a host name, got {host!r}")
    if all(c.isdigit() or c == "." for c in name) or ":" in name:
        # Looks like an IP literal: it must be one (never sent to DNS as a name).
        try:
            ipaddress.ip_address(name)
        except ValueError:
            raise ConfigError(f"{flag} {host!r} is not a valid IP address") from None
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"{flag} {host!r} does not resolve: {_reason(exc)}") from None
    seen: set[tuple[Any, ...]] = set()
    out: list[tuple[int, int, int, tuple[Any, ...]]] = []
    for family, kind, proto, _, address in infos:
        if address not in seen:
            seen.add(address)
            out.append((family, kind, proto, address))
    return out


def _bind_message(exc: OSError, host: str, port: int, what: str, host_flag: str) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"{what} {port} on {host} is in use"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host_flag} {host!r} is not an address of this machine"
    if exc.errno == errno.EACCES:
        return f"{what} {port} on {host}: permission denied (ports below 1024 need privileges)"
    return f"cannot listen on {host_flag} {host!r} {what} {port}: {_reason(exc)}"


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or exc)
