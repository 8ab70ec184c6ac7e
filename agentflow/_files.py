"""Writing a command's output file (``demo --report``, ``bench --report``, a trace,
``report --html``): whole or not at all where that can be done, and never replacing what
is not a regular file."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

__all__ = [
    "OutputFileError",
    "fd_writable",
    "open_text_output",
    "own_fd",
    "replaced_on_write",
    "through_name",
    "write_text_file",
]


class OutputFileError(OSError):
    """An output file that could not be made, written or put in place (its directory
    takes no new entries, the disk is full, the file is over the size limit): an
    :class:`OSError` whose message names the path.
    The command line prints it as one line (``agentflow CMD: error: …``, exit 1)."""

    def __str__(self) -> str:
        return str(self.strerror)


def write_text_file(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, whole or not at all (see
    :func:`open_text_output`)."""
    with open_text_output(path) as f:
        f.write(text)


@contextlib.contextmanager
def open_text_output(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """A text file (UTF-8) to write ``path`` with, in as many writes as needed (a trace,
    line by line): the file is in place once the block ends without an error.

    - ``path`` missing or a regular file: a temporary file next to it, then a rename, so
      that a reader never sees half a file, and an interrupted write (an error, Ctrl-C,
      SIGTERM: any exception out of the block) leaves the old one — the temporary file is
      removed. A symbolic link stays a link: the file it points to is the one written
      (made if missing). The file's mode is what a new file gets here (``0o666`` less the
      umask, as for every other file the commands write): the temporary file is made with
      ``os.open``, not ``tempfile.mkstemp``, whose ``0o600`` the rename would keep.
    - ``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N`` (the ``/dev/fd/N`` of a shell's
      ``>(jq .)`` too): written through a copy of that descriptor, at its offset, after
      what was printed to it (a file behind it, ``> out.txt``, is not replaced).
    - anything else (a device such as ``/dev/null``, a FIFO): opened and written
      directly. A rename would replace the device node with a regular file (as root,
      ``/dev/null`` itself), and cannot be made onto a pipe at all.

    Missing parent directories are created. A file that cannot be made, written or put
    in place is an :class:`OutputFileError` naming ``path`` (the temporary file removed):
    an :class:`OSError` out of the block (a write: ``ENOSPC``, ``EFBIG``) or from the
    close included — but for a ``BrokenPipeError`` on standard output, whose reader has
    gone (the command line ends quietly then, exit 141).
    """
    path = Path(path)
    fd = own_fd(path)
    if fd is not None and not fd_writable(fd):
        raise OutputFileError(errno.EBADF, f"cannot write {path}: open for reading only", str(path))
    if fd is not None:
        # /dev/stdout, /dev/fd/N, /proc/self/fd/N: written through that descriptor (a
        # copy of it: the same offset) — a regular file behind it (``> out.txt``) was
        # replaced by a rename, and what the command had printed to it was lost.
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            with os.fdopen(os.dup(fd), "w", encoding="utf-8") as direct:
                yield direct
        except OSError as exc:
            if fd == 1 and isinstance(exc, BrokenPipeError):
                raise  # standard output's reader gone: the command line ends quietly (141)
            raise _output_error(path, exc) from exc
        return
    try:
        mode = os.stat(path).st_mode  # through links
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "w", encoding="utf-8") as direct:
                yield direct
        except OSError as exc:
            raise _output_error(path, exc) from exc
        return
    target = path.resolve()  # a link's target (a dangling one: the file it would name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        while True:
            tmp = through_name(target)
            try:
                fd = os.open(tmp, flags, 0o666)
            except FileExistsError:  # (one in 2^48: another name)
                continue
            break
    except OSError as exc:
        raise _output_error(path, exc) from exc
    try:
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                yield f
        except OSError as exc:  # a write or the close (the disk full, the file too large)
            raise _output_error(path, exc) from exc
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise _output_error(path, exc) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def own_fd(path: Path) -> int | None:
    """The descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), if it names one that is open."""
    text = os.path.abspath(path)
    named = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}.get(text)
    if named is None:
        found = re.fullmatch(rf"/dev/fd/(\d+)|/proc/(?:self|{os.getpid()})/fd/(\d+)", text)
        if found is None:
            return None
        named = int(found[1] or found[2])
    try:
        os.fstat(named)
    except OSError:
        return None
    return named


def fd_writable(fd: int) -> bool:
    """Whether descriptor ``fd`` was opened for writing (where that can be asked)."""
    try:
        import fcntl
    except ImportError:  # (no fcntl: the write says so)
        return True
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY


def replaced_on_write(path: str | os.PathLike[str]) -> bool:
    """Whether writing ``path`` again replaces what was written there (a regular file,
    or none yet) rather than adding to it (this process's descriptor, a device, a pipe)."""
    if own_fd(Path(path)) is not None:
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True


def through_name(target: Path) -> Path:
    """A new name next to ``target`` for the temporary file it is written through (as
    long as its name plus 18 characters)."""
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")


def _output_error(path: Path, exc: OSError) -> OutputFileError:
    if isinstance(exc, OutputFileError):
        return exc
    return OutputFileError(exc.errno, f"cannot write {path}: {exc.strerror or exc}", str(path))
