"""One journal segment (``store/_journal.py``): a sparse file of its full size, mapped
whole and locked, whose bytes are written with zeros before a record is copied over
them, and the copy of one frame into it."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import sys
import weakref
import zlib
from pathlib import Path

from agentflow.store._journal_format import _FRAME, _MAGIC
from agentflow.store._records import AgentInfo

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no journal there
    fcntl = None  # type: ignore[assignment]

__all__ = ["_Segment", "_copy", "_fill", "_let_go_of", "_made", "_page_up", "_size"]

#: ``madvise(MADV_POPULATE_WRITE)`` (Linux ≥ 5.14): map pages in writable, in one call.
#: 23 is Linux's value (older Pythons lack the name); elsewhere, none.
_POPULATE_WRITE = getattr(
    mmap, "MADV_POPULATE_WRITE", 23 if sys.platform.startswith("linux") else None
)


#: Zeros that :func:`_fill` writes (made on first use).
_ZEROS: list[bytes] = []


def _fill(fd: int, start: int, end: int) -> None:
    """Write zeros over ``[start, end)`` of a segment, a hole until then: the write
    allocates its blocks (a full disk is an ``OSError`` here, not a ``SIGBUS`` on a later
    copy), and the loop's copies over them are plain page-cache writes. (Blocks only
    reserved with ``posix_fallocate`` are "unwritten" on ext4 and XFS: the first store to
    each page through the mapping then faults into the filesystem to convert them, ~3–4
    ms per 8 MiB here; written with ``pwrite``, ~1–2 ms; ``docs/store-cost.md``.)"""
    if not _ZEROS:
        _ZEROS.append(bytes(1 << 20))
    zeros = memoryview(_ZEROS[0])
    offset = start
    while offset < end:
        n = os.pwrite(fd, zeros[: min(len(zeros), end - offset)], offset)
        if n <= 0:  # (a regular file writes something or raises: never loop on nothing)
            raise OSError(f"pwrite wrote nothing at offset {offset}")
        offset += n


def _page_up(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


def _size(frames: list[bytes]) -> int:
    """The bytes ``frames`` take in a segment, headers included."""
    return sum(_FRAME.size + len(f) for f in frames)


def _copy(seg: _Segment, payload: bytes) -> None:
    """Copy one frame into ``seg`` at its offset (the caller checked that it fits)."""
    n = len(payload)
    o = seg.offset
    mm = seg.mm
    mm[o + 8 : o + 8 + n] = payload
    _FRAME.pack_into(mm, o, n, zlib.crc32(payload))  # last: the record is complete
    seg.offset = o + 8 + n


class _Segment:
    """One mapped, locked segment file: ``size`` bytes mapped, the first ``filled`` of them
    written (zeros, then records); records are only ever copied below ``filled``."""

    __slots__ = (
        "__weakref__", "agents", "faulted", "fd", "filled", "mm", "name", "offset", "path",
        "seq", "size", "texts",
    )  # fmt: skip

    def __init__(self, tmp: Path, size: int, fill: int, header: bytes = _MAGIC) -> None:
        # Made under a name the orphan scan does not match (``.…tmp``), locked, its first
        # ``fill`` bytes written, sized (the rest a hole) and mapped whole; :meth:`publish`
        # renames it: an opener never sees a segment that is not yet locked. The writer
        # thread makes the next one ahead of time (:meth:`Journal.make_spare`).
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self.fd = fd
        _made.add(self)  # a fork from now on lets go of it (_after_fork_in_child)
        try:
            assert fcntl is not None
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_nlink == 0:  # another opener took it for a dead one's
                raise FileNotFoundError(errno.ENOENT, "removed before it was locked", str(tmp))
            fill = min(size, _page_up(fill))
            _fill(fd, 0, fill)
            os.ftruncate(fd, size)  # the rest a hole, written before a record goes there
            self.mm = mmap.mmap(fd, size)
            self.mm[: len(_MAGIC)] = header
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            with contextlib.suppress(AttributeError):
                self.mm.close()
            os.close(fd)
            _made.discard(self)
            raise
        self.path, self.name = tmp, tmp.name
        self.seq, self.size, self.offset = 0, size, len(_MAGIC)
        self.filled = fill  # written from the start (zeros beyond the records)
        self.faulted = 0  # bytes from the start that populate() mapped in
        #: id(AgentInfo) -> (its ref, the object, kept so that the id stays its own) for
        #: the agents this segment holds a frame of.
        self.agents: dict[int, tuple[int, AgentInfo]] = {}
        #: text -> its ref, for the agents' instructions this segment holds a frame of.
        self.texts: dict[str, int] = {}

    def publish(self, path: Path, seq: int) -> None:
        """Give the segment its place in the journal (one rename)."""
        os.rename(self.path, path)
        self.path, self.name, self.seq = path, path.name, seq

    def populate(self, start: int, end: int) -> None:
        """Map in ``[start, end)`` (best effort: without ``MADV_POPULATE_WRITE`` the
        copies fault the pages in one by one)."""
        if _POPULATE_WRITE is None or end <= start:
            return
        try:
            self.mm.madvise(_POPULATE_WRITE, start, end - start)
        except (OSError, ValueError):
            return
        self.faulted = max(self.faulted, end)

    def close(self, *, delete: bool) -> None:
        _made.discard(self)  # (its descriptor's number may be another file's from now on)
        if delete:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self.mm.close()
        os.close(self.fd)


#: Every segment of this process not closed yet (one being made included).
_made: weakref.WeakSet[_Segment] = weakref.WeakSet()


def _let_go_of(s: _Segment) -> None:
    """Close a forked child's copies of ``s``'s descriptors."""
    _made.discard(s)
    with contextlib.suppress(OSError):
        os.close(s.fd)
    # The mapping holds a duplicate of the descriptor (CPython's mmap dups it), which
    # shares the lock too: unmapping the child's copy closes it (the parent's stays).
    with contextlib.suppress(OSError, BufferError, ValueError, AttributeError):
        s.mm.close()
