"""A killed writer's journal, committed by the next store to open the database (or to
load a run, or start an attempt): every segment of ``<db>.af-journal-*`` that no live
store holds locked, from the offset its ``meta`` marker gives, one transaction per
segment, then deleted (the format and the marker: ``store/_journal_format.py``)."""

from __future__ import annotations

import dataclasses
import glob
import mmap
import os
import sqlite3
import zlib
from collections.abc import Callable, Generator
from pathlib import Path

import msgspec

from agentflow._errors import StoreError
from agentflow._logging import get_logger
from agentflow.store._journal import AVAILABLE, _glob
from agentflow.store._journal_format import (
    _AGENT,
    _AGENT_TEXT,
    _FRAME,
    _LEGACY,
    _MAGIC,
    _ROWS,
    _SESSION,
    _TEXT,
    _VERSION,
    _agent_decoder,
    _agent_text_decoder,
    _decoders,
    _frame_decoder,
    _row_decoder,
    _session_decoder,
    _text_decoder,
    marker_key,
)
from agentflow.store._records import AgentInfo, Record
from agentflow.store._sqlite_write import Row, rollback, write_each

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no journal there, so none to ingest
    fcntl = None  # type: ignore[assignment]

__all__ = ["ASIDE", "ID_KEY", "clean_stop", "database_id", "frames", "ingest_orphans"]

_log = get_logger("agentflow.store")


def frames(data: bytes | mmap.mmap, start: int) -> Generator[tuple[int, Record | Row], None, int]:
    """The intact items of a segment's bytes from ``start``, each with the offset after
    it; stops at the first frame that is empty or cut short, and returns where (see
    :func:`clean_stop`). The agents' frames are read
    from the segment's start (a session's frame after ``start`` may refer to one before
    it) and yield nothing themselves, nor do the frames of their instructions' texts. A
    session's frame whose agent's frame (or that agent's text's) was lost to damage before
    ``start`` (an OS crash may lose any page of the journal, even one from before
    SQLite's last commit) ends it there too.

    Raises:
        ValueError: a session's frame refers to an agent, or an agent's frame to a text,
            the segment has no frame of (and none was lost to damage).
        msgspec.DecodeError: an intact frame does not decode.
    """
    agents: dict[int, AgentInfo] = {}
    texts: dict[int, str] = {}
    pos, size = len(_MAGIC), len(data)
    lost = False  # whether damage before ``start`` was skipped (agents' frames with it)
    while pos + _FRAME.size <= size:
        n, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + n
        payload = data[pos + _FRAME.size : end]
        if n == 0 or end > size or zlib.crc32(payload) != crc:
            if pos < start:  # damage in what was committed already: go on from there
                pos, lost = start, True
                continue
            return pos
        kind, raw = _frame_decoder.decode(payload)
        if kind == _TEXT:
            ref, text = _text_decoder.decode(raw)
            texts[ref] = text
        elif kind == _AGENT_TEXT:
            ref, text_ref, agent = _agent_text_decoder.decode(raw)
            if text_ref in texts:
                agents[ref] = dataclasses.replace(agent, instructions=texts[text_ref])
            elif not lost:
                raise ValueError(f"an agent's frame at byte {pos} refers to no text ({text_ref})")
        elif kind == _AGENT:  # AFJ3's, the prompt in it
            ref, agent = _agent_decoder.decode(raw)
            agents[ref] = agent
        elif pos < start:
            pass  # committed already
        elif kind == _SESSION:
            ref, session = _session_decoder.decode(raw)
            if ref not in agents:
                if lost:
                    return pos
                raise ValueError(f"a session's frame at byte {pos} refers to no agent ({ref})")
            yield end, msgspec.structs.replace(session, agent=agents[ref])
        elif kind >= _ROWS:
            yield end, (kind - _ROWS, _row_decoder.decode(raw))
        else:
            yield end, _decoders[kind].decode(raw)
        pos = end
    return pos


def clean_stop(data: bytes, stop: int) -> bool:
    """Whether a segment whose frames stopped at ``stop`` ends there as its writer left
    it: nothing but zeros after (the writer writes zeros ahead of its records), or no
    room for a frame. Else a frame was damaged (an OS crash lost a page, a byte flipped)
    and what follows it is lost — so are the writer's later segments' records, which
    would leave a gap (``ingest_orphans`` keeps them aside)."""
    return len(data) - stop < _FRAME.size or data.count(0, stop) == len(data) - stop


#: The ``meta`` key of the database's id, which each journal segment's header carries.
ID_KEY = "journal_db_id"


def database_id(conn: sqlite3.Connection) -> bytes:
    """The database's id (4 random bytes, never all zeros), made on its first open by a
    version that writes it into its journal's segments (``_journal_format.header``)."""
    while True:
        row = conn.execute("SELECT value FROM meta WHERE key=?", (ID_KEY,)).fetchone()
        if row is not None:
            return bytes.fromhex(row[0])
        made = os.urandom(4)
        if any(made):  # (two openers at once: the first one's stays)
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?,?)", (ID_KEY, made.hex())
            )


def ingest_orphans(
    conn: sqlite3.Connection,
    db: Path,
    write: Callable[[sqlite3.Connection, list[Record | Row]], None],
    left_out: list[tuple[Record | Row, Exception]] | None = None,
    *,
    db_id: bytes | None = None,
    legacy: bool = True,
) -> int:
    """Commit every journal segment of ``db`` that no open store holds (its writer was
    killed, or could not commit), then delete it; returns how many records it committed.

    Each segment is committed in one transaction that also moves its ``meta`` marker, so
    a segment met again is not ingested twice. A segment written for another database
    (its header's id is not ``db_id``; or, unless ``legacy``, an earlier format's, with no
    id: the open that creates the database passes ``legacy=False``) is not ingested: it
    is kept aside (renamed ``<db>.af-aside-…``) and named in a warning. A record that
    fails on its own (a value SQLite cannot bind, say) is left out, as a live commit
    leaves it out, and added to ``left_out`` with its error.

    Raises:
        StoreError: a segment cannot be read, decoded or written (it is kept).
    """
    if not AVAILABLE:
        return 0
    assert fcntl is not None
    total = 0
    paths = sorted(glob.glob(_glob(db)))  # a writer's segments in order (zero-padded)
    writers = [_writer(p) for p in paths]
    broken: dict[str, list[str]] = {}  # writer -> its segments kept aside
    foreign: list[str] = []  # segments of another database, kept aside
    for i, p in enumerate(paths):
        try:
            fd = os.open(p, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live store's
            if writers[i] in broken:  # after a damaged one: ingesting it leaves a gap
                broken[writers[i]].append(_set_aside(Path(p)))
                continue
            if not _ours(os.pread(fd, len(_MAGIC), 0), db_id, legacy):
                foreign.append(_set_aside(Path(p)))
                continue
            later = writers[i] in writers[i + 1 :]
            count, clean = _ingest_one(conn, fd, Path(p), write, left_out, aside=later)
            total += count
            if not clean and later:
                broken[writers[i]] = [str(_aside_path(Path(p)))]
        except (OSError, ValueError, msgspec.DecodeError, sqlite3.Error) as exc:
            raise StoreError(
                f"{db}: cannot ingest the journal segment {p} left by a run that did not "
                f"close its store: {exc} (it is kept; move it aside to open the store "
                "without its records)"
            ) from exc
        finally:
            os.close(fd)
    for kept in broken.values():
        _log.warning(
            "store.journal_set_aside", path=str(db), segments=kept,
            reason="a damaged frame in the first: its records after it are lost, and the "
            "later segments' records would follow a gap (a resume runs them again)",
        )  # fmt: skip
    if foreign:
        _log.warning(
            "store.journal_set_aside", path=str(db), segments=foreign,
            reason="written for another database at this path (one removed since): not "
            "ingested into this one",
        )  # fmt: skip
    # A segment being made when its process died (before its rename): empty; delete it.
    for p in glob.glob(glob.escape(str(db.parent / f".{db.name}.af-journal-")) + "*.tmp"):
        _remove_unlocked(p)
    # Markers of segments that are gone (deleted after their last commit).
    keys = [k for (k,) in conn.execute("SELECT key FROM meta WHERE key LIKE 'journal:%'")]
    gone = [(k,) for k in keys if not (db.parent / k.removeprefix("journal:")).exists()]
    if gone:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("DELETE FROM meta WHERE key=?", gone)
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
    return total


def _remove_unlocked(path: str) -> None:
    """Delete ``path`` unless a live store holds its lock."""
    assert fcntl is not None
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
    except OSError:  # held (BlockingIOError), or gone meanwhile
        pass
    finally:
        os.close(fd)


def _ingest_one(
    conn: sqlite3.Connection,
    fd: int,
    path: Path,
    write: Callable[[sqlite3.Connection, list[Record | Row]], None],
    left_out: list[tuple[Record | Row, Exception]] | None,
    *,
    aside: bool,
) -> tuple[int, bool]:
    """Ingest one segment (locked: ``fd``); how many records it committed, and whether
    it stopped clean (:func:`clean_stop`). Then it is deleted — or, with ``aside`` when
    it did not stop clean, kept aside (:func:`_set_aside`)."""
    conn.execute("BEGIN IMMEDIATE")  # one ingester at a time, and the marker is current
    try:
        if os.fstat(fd).st_nlink == 0:  # another opener ingested and deleted it
            conn.execute("ROLLBACK")
            return 0, True
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        if data[: len(_VERSION)] != _VERSION and data[: len(_MAGIC)] not in _LEGACY:
            raise ValueError(
                "not an agentflow journal segment, or one of a format this version does "
                f"not read (header {data[: len(_MAGIC)]!r})"
            )
        key = marker_key(path.name)
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        start = max(len(_MAGIC), int(row[0]) if row is not None else 0)
        end = start
        records: list[Record | Row] = []
        read = frames(data, start)
        while True:
            try:
                end, record = next(read)
            except StopIteration as stopped:
                clean = clean_stop(data, stopped.value)
                break
            records.append(record)
        lost = write_each(conn, records, write)
        if left_out is not None:
            left_out.extend(lost)
        count = len(records) - len(lost)
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, str(end)))
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    if aside and not clean:
        _set_aside(path)
    else:
        os.unlink(path)
    return count, clean


def _ours(head: bytes, db_id: bytes | None, legacy: bool) -> bool:
    """Whether a segment whose header is ``head`` is to be ingested into the database
    whose id is ``db_id``: one of this format written for it, or, with ``legacy``, one of
    an earlier format (no id); one of a format this version does not read is (its ingest
    says so)."""
    if head[: len(_VERSION)] == _VERSION:
        return db_id is None or head[len(_VERSION) :] == db_id
    return legacy or head not in _LEGACY


#: What a segment kept aside is renamed to: ``<db>.af-journal-…`` becomes
#: ``<db>.af-aside-…``, which no open ingests (move it back to ingest it).
ASIDE = ".af-aside-"


def _writer(path: str) -> str:
    """The writer a segment's path names (all but its sequence number)."""
    return path.rsplit("-", 1)[0]


def _aside_path(path: Path) -> Path:
    head, _, tail = path.name.rpartition(".af-journal-")
    return path.with_name(head + ASIDE + tail)


def _set_aside(path: Path) -> str:
    """Rename ``path`` (locked by the caller) so that no open ingests it; its new path."""
    new = _aside_path(path)
    os.rename(path, new)
    return str(new)
