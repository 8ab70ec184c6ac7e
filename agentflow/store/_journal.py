"""The SQLite store's first tier: an append-only journal file beside the database.

Why: on this VM a SQLite commit after a 10 ms idle gap costs ~300–450 µs of CPU (cold
caches), and at the default ``batch_interval_s`` every batch paid one — 7–10% of the
demo's client CPU before anything was encoded (``docs/store.md``, "Cost"). With the
journal, every batch is one ``msgspec`` encode and one ``os.write`` to this file, and
the records reach SQLite in larger batches (``SQLiteStore(ingest_interval_s=...)``),
before every read and lease change, at ``flush()`` and at close.

Durability is the class SQLite's WAL with ``synchronous=NORMAL`` gives (which the store
uses): neither fsyncs per commit, so what was written survives the process being killed
(it is in the kernel's page cache) and an operating-system crash may lose the last
writes. A batch is one frame — length, CRC-32, payload — so a write cut short is seen
as the journal's end, and everything before it is kept, in order.

Each open store writes its own file, ``<db>.af-journal-<pid>-<token>``, and holds an
exclusive ``flock`` on it while it is open (the kernel drops it when the process dies,
``kill -9`` included). Whoever opens the database next ingests every journal nobody
holds (:func:`ingest_orphans`) before anything else, then deletes it.

Exactly once: the file starts with a generation number, bumped each time the journal is
emptied after an ingest; the transaction that ingests records also records in
``meta`` (key ``journal:<file name>``) the generation and the offset it ingested up to.
So a journal that was ingested but not yet emptied (killed in between) is not ingested
twice: its ingested part is skipped, and no turn is recorded twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import secrets
import sqlite3
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agentflow._errors import StoreError
from agentflow.store._records import (
    PolicyState,
    Record,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    ToolFinished,
    TurnFinished,
)

__all__ = ["Journal", "encode_batch", "ingest_orphans", "marker_key"]

_MAGIC = b"AFJ1"
_HEADER = struct.Struct("<4sQ")  # magic, generation
_FRAME = struct.Struct("<II")  # payload length, CRC-32 of the payload
_KINDS: tuple[type[Any], ...] = (
    TurnFinished,
    ToolFinished,
    SessionStarted,
    SessionEnded,
    RunStarted,
    RunEnded,
    PolicyState,
)
_KIND = {k: i for i, k in enumerate(_KINDS)}
_encoder = msgspec.msgpack.Encoder()
_batch_decoder = msgspec.msgpack.Decoder(list[tuple[int, msgspec.Raw]])
_decoders = [msgspec.msgpack.Decoder(k) for k in _KINDS]


def encode_batch(records: list[Record]) -> bytes:
    """One journal frame holding ``records``, in order.

    Raises:
        TypeError, ValueError, OverflowError: a record cannot be encoded (the caller
            then commits that batch to SQLite directly, where it fails as before).
    """
    payload = _encoder.encode([(_KIND[type(r)], r) for r in records])
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _decode(payload: bytes) -> list[Record]:
    return [_decoders[k].decode(raw) for k, raw in _batch_decoder.decode(payload)]


def marker_key(name: str) -> str:
    """The ``meta`` key that holds how much of the journal ``name`` SQLite has."""
    return f"journal:{name}"


def journal_glob(db: Path) -> str:
    """The glob pattern of every journal of the database ``db``."""
    return glob.escape(str(db)) + ".af-journal-*"


class Journal:
    """This process's journal of one database (created on the first append)."""

    def __init__(self, db: Path) -> None:
        self.path = db.with_name(f"{db.name}.af-journal-{os.getpid()}-{secrets.token_hex(4)}")
        self.name = self.path.name
        self.generation = 0
        #: Bytes written in the current generation, header included.
        self.offset = 0
        self._fd: int | None = None

    def append(self, frame: bytes) -> None:
        """Append one frame (one ``os.write``; the file is created on the first)."""
        fd = self._fd
        if fd is None:
            fd = self._open()
        n = os.write(fd, frame)
        if n != len(frame):  # a regular file short-writes only when the disk is full
            raise OSError(f"{self.path}: short write ({n} of {len(frame)} bytes)")
        self.offset += n

    def _open(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, _HEADER.pack(_MAGIC, self.generation))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.offset = _HEADER.size
        return fd

    def reset(self) -> None:
        """Empty the journal after its records were committed: the next generation."""
        if self._fd is None:
            return
        self.generation += 1
        os.ftruncate(self._fd, 0)
        os.write(self._fd, _HEADER.pack(_MAGIC, self.generation))
        self.offset = _HEADER.size

    def marker(self) -> str:
        """What the ``meta`` row says once everything written so far is in SQLite."""
        return f"{self.generation}:{self.offset}"

    def remove(self) -> None:
        """Delete the file (its records are in SQLite) and let go of it."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def close(self) -> None:
        """Let go of the file and keep it (its records are not all in SQLite: the next
        open ingests them)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _records_after(data: bytes, marker: str | None) -> tuple[list[Record], int, int]:
    """The records of a journal's bytes not yet in SQLite, its generation, and the
    offset where its intact frames end."""
    if len(data) < _HEADER.size:
        return [], 0, len(data)
    magic, generation = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not an agentflow journal")
    pos = _HEADER.size
    if marker is not None:
        gen_s, _, off_s = marker.partition(":")
        if int(gen_s) == generation:
            pos = max(pos, int(off_s))
    records: list[Record] = []
    while pos + _FRAME.size <= len(data):
        n, crc = _FRAME.unpack_from(data, pos)
        start = pos + _FRAME.size
        payload = data[start : start + n]
        if len(payload) < n or zlib.crc32(payload) != crc:
            break  # a write cut short: the journal ends here
        records.extend(_decode(payload))
        pos = start + n
    return records, generation, pos


def ingest_orphans(
    conn: sqlite3.Connection, db: Path, write: Callable[[sqlite3.Connection, Record], None]
) -> int:
    """Ingest every journal of ``db`` that no open store holds (its writer was killed or
    failed to close), then delete it; returns how many records were ingested.

    Each journal is ingested in one transaction that also moves its ``meta`` marker, so
    a journal met again (two openers at once, or a kill before its file was deleted) is
    not ingested twice.

    Raises:
        StoreError: a journal cannot be read or its records cannot be written.
    """
    total = 0
    for p in sorted(glob.glob(journal_glob(db))):
        try:
            fd = os.open(p, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live store's
            total += _ingest_one(conn, fd, Path(p), write)
        except (OSError, ValueError, msgspec.DecodeError, sqlite3.Error) as exc:
            raise StoreError(
                f"{db}: cannot ingest the journal {p} left by a killed run: {exc}"
            ) from exc
        finally:
            os.close(fd)
    # Markers of journals that are gone (deleted after their last ingest).
    keys = [k for (k,) in conn.execute("SELECT key FROM meta WHERE key LIKE 'journal:%'")]
    gone = [k for k in keys if not (db.parent / k.removeprefix("journal:")).exists()]
    if gone:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("DELETE FROM meta WHERE key=?", [(k,) for k in gone])
        conn.execute("COMMIT")
    return total


def _ingest_one(
    conn: sqlite3.Connection,
    fd: int,
    path: Path,
    write: Callable[[sqlite3.Connection, Record], None],
) -> int:
    conn.execute("BEGIN IMMEDIATE")  # one ingester at a time, and the marker is current
    try:
        if os.fstat(fd).st_nlink == 0:  # another opener ingested and deleted it
            conn.execute("ROLLBACK")
            return 0
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
        key = marker_key(path.name)
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        records, generation, end = _records_after(data, None if row is None else row[0])
        for r in records:
            write(conn, r)
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, f"{generation}:{end}")
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    os.unlink(path)
    return len(records)
