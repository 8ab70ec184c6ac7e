"""The SQLite store's first tier: every record, as it is written, copied into a
memory-mapped journal file beside the database.

Why: on this machine a SQLite commit costs ~250–450 µs of CPU when it follows an idle
gap (cold caches; ``docs/store-cost.md``), so committing every 10 ms cost the demo
~12% of its client CPU, while committing rarely widened what a ``kill -9`` loses. The
journal removes that trade: :meth:`Journal.append` encodes the record (``msgspec``
MessagePack) and copies it into a shared mapping of the file — no system call, no thread
wakeup — and once the copy is done the record is in the kernel's page cache, so it
survives the process being killed at any later instant. SQLite then gets the records in
large transactions (every :data:`JOURNAL_INTERVAL_S`, and before every read, lease
change and flush, and at close).

Durability is the class SQLite's WAL with ``synchronous=NORMAL`` gives (which the store
uses): what was written survives the process dying; an operating-system crash may lose
the last writes. A record is one frame — payload length, CRC-32, payload — and the
header is written after the payload, so a copy cut short by a kill reads as the
journal's end; everything before it is kept, in order. A session start's frame refers to
its agent's, and an agent's to its system prompt's, each written once per segment
(:meth:`Journal._session`). A segment is a sparse file of its full size, mapped whole,
whose bytes are written with zeros (``pwrite``) before any record is copied over them —
the first MiB as it is made, the rest ahead of the records as they come (the writer
thread, at each commit, or the loop itself when it gets there first) — so a full disk is
an ``OSError`` from that write (the record then goes to SQLite directly), never a
``SIGBUS`` on a copy, and a run pays for the zeros it uses, not for the whole segment.

The format on disk is ``_journal_format.py``; reading a killed writer's journal back,
``_journal_ingest.py``.

Files: each open store writes its own segments, ``<db>.af-journal-<pid>-<token>-<seq>``,
8 MiB each (more for a record that needs it), and holds an exclusive ``flock`` on each
until its records are committed and it is deleted (the kernel drops the locks when the
process dies). Whoever opens the database next ingests every segment nobody holds
(:func:`ingest_orphans`) before anything else, then deletes it. Exactly once: the
transaction that commits a segment's records also records in ``meta`` (key
``journal:<file name>``) the offset it committed up to, so a segment met again (a kill
between that commit and the file's deletion, or two openers at once) is not ingested
twice.
"""

from __future__ import annotations

import glob
import mmap
import os
import secrets
import threading
import weakref
from pathlib import Path

import msgspec

from agentflow.store._journal_format import (
    _FRAME,
    _KIND,
    _MAGIC,
    _NO_AGENT,
    _ROWS,
    _encoder,
    marker_key,
    session_frames,
)
from agentflow.store._journal_segment import (
    _copy,
    _fill,
    _let_go_of,
    _made,
    _page_up,
    _Segment,
    _size,
)
from agentflow.store._records import (
    Record,
    SessionStarted,
)
from agentflow.store._sqlite_io import Row

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no journal there (SQLiteStore commits each batch)
    fcntl = None  # type: ignore[assignment]

__all__ = ["AVAILABLE", "JOURNAL_INTERVAL_S", "Journal", "Mark", "marker_key"]

#: Whether this platform has what the journal needs: ``flock`` (not Windows).
AVAILABLE = fcntl is not None

#: A position in a journal: (segment sequence number, byte offset after a record).
Mark = tuple[int, int]

SEGMENT_BYTES = 8 << 20
#: ``SQLiteStore``'s default commit interval with a journal, in seconds. The journal
#: keeps every record meanwhile, so the interval only sets how often SQLite is written:
#: a commit costs ~0.8 ms of CPU in a run here (``docs/store-cost.md``), and another
#: process reading a live store sees its records up to this much later.
JOURNAL_INTERVAL_S = 5.0
#: Bytes of a new segment written with zeros as it is made, and the least that
#: :meth:`Journal.fill_ahead` keeps written ahead of the last record; it keeps twice
#: what was journaled since its last call ahead (it runs at each commit), up to the
#: segment's end. The demo journals ~1.9 MiB in a run: it writes ~3 MiB of zeros instead
#: of a whole 8 MiB segment (``docs/store-cost.md``).
FILL_BYTES = 1 << 20


def _glob(db: Path) -> str:
    return glob.escape(str(db)) + ".af-journal-*"


class Journal:
    """This store's journal of one database (no file until a segment is needed).
    :meth:`append` runs under ``lock`` (the store's batch lock), on the event loop;
    :meth:`make_spare`, :meth:`fill_ahead`, :meth:`committed`, :meth:`drop_before` and
    :meth:`close` run on the store's writer thread. Zeros are written past a segment's
    ``filled`` under a second lock, taken after ``lock`` or alone, so that the loop and
    the writer thread never write the same bytes: the loop copies a record only below
    ``filled``, which moves once the zeros under it are written."""

    def __init__(self, db: Path, lock: threading.Lock, header: bytes) -> None:
        #: Each segment's header: the format's version and the database's id.
        self.header = header
        self._stem = f"{db.name}.af-journal-{os.getpid()}-{secrets.token_hex(4)}"
        self._dir = db.parent
        self._lock = lock
        self._segments: list[_Segment] = []  # oldest first; the last one is written
        self._spare: _Segment | None = None  # the next one, made ahead by the writer
        self._seq = 0
        self._pid = os.getpid()
        self._fill_lock = threading.Lock()
        #: Bytes journaled so far (frames), and as of the last :meth:`fill_ahead`.
        self.journaled = 0
        self._journaled_at_fill = 0
        #: Bytes to keep written ahead of the last record (the last :meth:`fill_ahead`'s).
        self._ahead = FILL_BYTES
        _live.add(self)

    def append(self, item: Record | Row) -> Mark:
        """Copy ``item`` (a record, or a row ``_sqlite_io.prepare`` made) into the
        journal; return the position after it.

        Raises:
            TypeError, ValueError, OverflowError: it cannot be encoded.
            OSError: no segment could be made (a full disk): nothing was written.
        """
        if type(item) is tuple:
            payload = _encoder.encode((_ROWS + item[0], item[1]))
        elif type(item) is SessionStarted:
            return self._session(item)
        else:
            payload = _encoder.encode((_KIND[type(item)], item))
        need = _FRAME.size + len(payload)
        seg = self._segments[-1] if self._segments else None
        if seg is None or seg.offset + need > seg.size:
            seg = self._next(need)
        if seg.offset + need > seg.filled:
            self._extend(seg, seg.offset + need)
        _copy(seg, payload)
        self.journaled += need
        return seg.seq, seg.offset

    def _session(self, item: SessionStarted) -> Mark:
        """A session start, as a frame that refers to its agent's: the agent's frame (and
        its instructions' text's) go first unless this segment holds them, and all go in
        one segment, so that each segment reads back alone."""
        agent = item.agent
        stub = msgspec.structs.replace(item, agent=_NO_AGENT)
        seg = self._segments[-1] if self._segments else None
        if seg is not None:
            frames, ref, text = session_frames(seg.agents, seg.texts, agent, stub)
        if seg is None or seg.offset + _size(frames) > seg.size:
            frames, ref, text = session_frames({}, {}, agent, stub)  # refs from 0 there
            seg = self._next(_size(frames))
        need = _size(frames)
        if seg.offset + need > seg.filled:
            self._extend(seg, seg.offset + need)
        for frame in frames:
            _copy(seg, frame)
        self.journaled += need
        if text is not None:
            seg.texts[agent.instructions] = text
        if ref is not None:
            seg.agents[id(agent)] = (ref, agent)
        return seg.seq, seg.offset

    def _extend(self, seg: _Segment, end: int) -> None:
        """Write zeros up to ``end`` at least (a page boundary, ``FILL_BYTES`` more at
        least) before the loop copies a record there: the writer thread's
        :meth:`fill_ahead` had not got that far (event loop, under the batch lock).

        Raises:
            OSError: the zeros could not be written (a full disk): nothing was copied.
        """
        if end > seg.filled:
            self._fill_to(seg, min(seg.size, max(_page_up(end), seg.filled + FILL_BYTES)))

    def _fill_to(self, seg: _Segment, target: int) -> None:
        """Write zeros from ``seg.filled`` up to ``target``, then move ``filled`` there:
        under the fill lock, which the loop (:meth:`_extend`) and the writer thread
        (:meth:`fill_ahead`) both take, so that neither writes zeros the other has copied
        a record over (``filled`` is read again under it)."""
        with self._fill_lock:
            if target > seg.filled:
                _fill(seg.fd, seg.filled, target)
                seg.filled = target

    def _next(self, need: int) -> _Segment:
        if os.getpid() != self._pid:
            raise OSError("the journal belongs to the process that forked this one")
        seg, self._spare = self._spare, None
        if seg is None or seg.size < need + len(_MAGIC):
            if seg is not None:  # too small for this record
                seg.close(delete=True)
            seg = self._make(max(SEGMENT_BYTES, need + len(_MAGIC)), need + len(_MAGIC))
        self._seq += 1
        try:
            seg.publish(self._dir / f"{self._stem}-{self._seq:08d}", self._seq)
        except OSError:  # (its file was removed meanwhile): let go of it, nothing lost
            seg.close(delete=True)
            raise
        self._segments.append(seg)
        return seg

    def _make(self, size: int, fill: int) -> _Segment:
        fill = max(fill, FILL_BYTES)
        for _ in range(2):
            try:
                return _Segment(self._tmp_path(), size, fill, self.header)
            except FileNotFoundError:  # an opener's cleanup, between its creation and lock
                continue
        return _Segment(self._tmp_path(), size, fill, self.header)

    def _tmp_path(self) -> Path:
        return self._dir / f".{self._stem}-{secrets.token_hex(4)}.tmp"

    def make_spare(self) -> None:
        """Make the next segment ahead of time, mapped in for its first records, when
        there is none or the one written is half full: the event loop then only renames
        it (writer thread).

        Raises:
            OSError: it could not be made (the loop will try again itself).
        """
        with self._lock:
            if self._spare is not None:
                return
            last = self._segments[-1] if self._segments else None
            if last is not None and last.offset < last.size // 2:
                return
            ahead = self._ahead
        seg = self._make(SEGMENT_BYTES, ahead)
        seg.populate(0, seg.filled)
        with self._lock:  # only this thread makes spares: the slot is still empty
            self._spare = seg

    def fill_ahead(self) -> None:
        """Write zeros ahead of the last record and map their pages in, so that the loop
        neither writes them itself nor takes a fault per page (writer thread, at each
        commit: twice what was journaled since the last call, ``FILL_BYTES`` at least, up
        to the segment's end; a spare made next gets as much).

        Raises:
            OSError: the zeros could not be written (the loop will try itself).
        """
        with self._lock:
            seg = self._segments[-1] if self._segments else None
            if seg is None:
                return
            offset = seg.offset
            self._ahead = max(FILL_BYTES, 2 * (self.journaled - self._journaled_at_fill))
            self._journaled_at_fill = self.journaled
            target = min(seg.size, _page_up(offset + self._ahead))
        self._fill_to(seg, target)
        start = max(seg.faulted, offset & ~(mmap.PAGESIZE - 1))
        if target - start >= FILL_BYTES // 4:  # else most of it is mapped in already
            seg.populate(start, target)

    def committed(self, mark: Mark) -> list[tuple[str, int]]:
        """The ``meta`` markers that say SQLite holds everything up to ``mark``:
        (key, offset) of every segment up to ``mark``'s."""
        seq, offset = mark
        return [
            (marker_key(s.name), offset if s.seq == seq else s.offset)
            for s in self._segments
            if s.seq <= seq
        ]

    def drop_before(self, mark: Mark) -> list[str]:
        """Delete the segments wholly before ``mark``'s (their records are committed);
        returns their ``meta`` keys."""
        gone = [s for s in self._segments if s.seq < mark[0]]
        for s in gone:
            self._segments.remove(s)
            s.close(delete=True)
        return [marker_key(s.name) for s in gone]

    def close(self, *, delete: bool) -> list[str]:
        """Let go of every segment; delete them if their records are all committed
        (else the next open ingests them). Returns the deleted segments' keys."""
        with self._lock:
            segs, self._segments = self._segments, []
            spare, self._spare = self._spare, None
        if spare is not None:  # holds no record
            spare.close(delete=True)
        for s in segs:
            s.close(delete=delete)
        return [marker_key(s.name) for s in segs] if delete else []


_live: weakref.WeakSet[Journal] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: close the descriptors of every segment (a journal's, and one
    the writer thread was making at the fork), which share the parent's open files and
    so its ``flock`` — a child outliving a killed parent would keep its journal locked,
    and the next open would take it for a live store's. The parent's locks stay (a lock
    belongs to the open file, which the parent still holds); no lock is taken here
    (another thread may have held it at the fork). The child writes no segment
    (``_next`` refuses): they are the parent's."""
    for j in list(_live):
        j._segments, j._spare = [], None
    for seg in list(_made):
        _let_go_of(seg)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
