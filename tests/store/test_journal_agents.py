"""The journal writes an agent once per segment, and a system prompt once per segment: a
session's frame refers to its agent's, an agent's to its prompt's. A fleet's sessions share
a few agents, and its agents a few system prompts of tens of KB; copied into every session's
frame they were half of the demo's journal (and 1,000 sessions of one agent with a 28 KB
prompt would have written 28 MB of it at the run's start), into every agent's frame 86% of
it (the demo's 64 agents share one prompt)."""

from __future__ import annotations

import asyncio
import glob
import sqlite3
import zlib
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.store import (
    AgentInfo,
    RunStarted,
    SessionStarted,
    SQLiteStore,
    _journal,
    _journal_format,
    _journal_ingest,
)
from agentflow.store._journal_format import _FRAME, _KIND, _ROWS, _encoder, _frame_decoder
from agentflow.store._sqlite_write import prepare

from .journal_child import tool_result
from .journal_review25_child import session as _session

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")

PROMPT = "You review code carefully. " * 800  # ~21 KB


def _agent(name: str = "reviewer") -> AgentInfo:
    return AgentInfo(name=name, fingerprint=f"fp-{name}", instructions=PROMPT, config={"m": 1})


def _segments(db: Path) -> list[str]:
    return sorted(glob.glob(glob.escape(str(db)) + ".af-journal-*"))


def _sessions(data: bytes, start: int) -> list[str]:
    """The session ids of the session starts ``frames`` reads from ``start``."""
    return [
        r.session_id
        for _, r in _journal_ingest.frames(data, start)
        if isinstance(r, SessionStarted)
    ]


def _kinds(data: bytes) -> list[int]:
    """The kind of every intact frame of a segment's bytes."""
    out, pos = [], len(_journal_format._MAGIC)
    while pos + _FRAME.size <= len(data):
        n, crc = _FRAME.unpack_from(data, pos)
        payload = data[pos + _FRAME.size : pos + _FRAME.size + n]
        if n == 0 or zlib.crc32(payload) != crc:
            break
        out.append(_frame_decoder.decode(payload)[0])
        pos += _FRAME.size + n
    return out


def _existing(db: Path) -> bytes:
    """Make the database ``db`` (an empty store); the header of its journal's segments."""
    asyncio.run(_write(db, []))
    conn = sqlite3.connect(db)
    try:
        (value,) = conn.execute(
            "SELECT value FROM meta WHERE key=?", (_journal_ingest.ID_KEY,)
        ).fetchone()
    finally:
        conn.close()
    return _journal_format.header(bytes.fromhex(value))


async def _write(db: Path, items: list[SessionStarted], *, close: bool = True) -> SQLiteStore:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=len(items)))
    for item in items:
        store.write(item)
    if close:
        await store.aclose()
    return store


def _live_segment(db: Path, sessions: list[SessionStarted]) -> bytes:
    """The bytes of the one segment of a store that wrote ``sessions``, read while it is
    open (a clean close deletes it)."""

    async def main() -> bytes:
        store = await _write(db, sessions, close=False)
        (segment,) = _segments(db)
        data = await asyncio.to_thread(Path(segment).read_bytes)
        await store.aclose()
        return data

    return asyncio.run(main())


def _stored(db: Path) -> list[tuple[str, str, str, str]]:
    async def main() -> list[tuple[str, str, str, str]]:
        store = SQLiteStore(db)
        try:
            run = await store.load("r")
        finally:
            await store.aclose()
        return [
            (s.session_id, s.agent, s.task[0]["content"], str(s.metadata)) for s in run.sessions
        ]

    return asyncio.run(main())


def test_sessions_of_one_agent_write_it_once(tmp_path: Path) -> None:
    """20 sessions of one agent: one agent frame and 20 small session frames, and each
    session reads back with the whole agent (its prompt in full)."""
    db = tmp_path / "one.db"
    agent = _agent()
    sessions = [_session(i, agent) for i in range(20)]

    data = _live_segment(db, sessions)
    kinds = _kinds(data)
    assert kinds.count(_journal_format._AGENT_TEXT) == kinds.count(_journal_format._TEXT) == 1
    assert kinds.count(_journal_format._SESSION) == 20
    assert _KIND[SessionStarted] not in kinds
    read = [r for _, r in _journal_ingest.frames(data, len(_journal_format._MAGIC))]
    assert [r.session_id for r in read if isinstance(r, SessionStarted)] == [
        s.session_id for s in sessions
    ]
    assert all(r.agent.instructions == PROMPT for r in read if isinstance(r, SessionStarted))
    assert [s[0] for s in _stored(db)] == [s.session_id for s in sessions]


def test_each_segment_holds_its_own_agent_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments that fill up between sessions: every segment that holds a session of the
    agent holds the agent's frame too, so each reads back alone — as a killed writer's
    segments are ingested, one at a time, each from its own marker."""
    monkeypatch.setattr(_journal, "SEGMENT_BYTES", 32 << 10)
    db = tmp_path / "rot.db"
    agent = _agent()
    sessions = [_session(i, agent) for i in range(12)]

    async def main() -> list[bytes]:
        store = await _write(db, [], close=False)
        for i, session in enumerate(sessions):  # with ~10 KB of tool results after each
            store.write(session)
            for k in range(20):
                store.write(tool_result(100 * i + k))
        data = [await asyncio.to_thread(Path(p).read_bytes) for p in _segments(db)]
        await store.aclose()
        return data

    segments = asyncio.run(main())
    assert len(segments) > 2
    seen = []
    for data in segments:
        kinds = _kinds(data)
        if _journal_format._SESSION in kinds:
            assert (
                kinds.count(_journal_format._AGENT_TEXT) == kinds.count(_journal_format._TEXT) == 1
            )
        for _, r in _journal_ingest.frames(data, len(_journal_format._MAGIC)):
            if isinstance(r, SessionStarted):
                assert r.agent.instructions == PROMPT
                seen.append(r.session_id)
    assert seen == [s.session_id for s in sessions]
    assert len(_stored(db)) == 12


def test_a_session_after_the_marker_finds_its_agent_before_it(tmp_path: Path) -> None:
    """Ingestion from a marker past the agent's frame (those records were committed):
    the agent is still read; damage before the marker does not stop what follows it."""
    db = tmp_path / "mark.db"
    agent = _agent()

    data = bytearray(_live_segment(db, [_session(i, agent) for i in range(4)]))
    ends = [end for end, _ in _journal_ingest.frames(bytes(data), len(_journal_format._MAGIC))]
    mark = ends[2]  # the run's start and two sessions committed
    assert _sessions(bytes(data), mark) == ["s2", "s3"]
    data[ends[1] + _FRAME.size + 3] ^= 0xFF  # damage the second session's frame (committed)
    assert _sessions(bytes(data), mark) == ["s2", "s3"]
    # From before the damage: what precedes it, then the journal's end.
    assert _sessions(bytes(data), ends[0]) == ["s0"]


def test_a_session_frame_without_its_agent_is_a_store_error(tmp_path: Path) -> None:
    """A segment whose session frame refers to an agent it holds no frame of cannot be
    committed: a ``StoreError`` naming it, and the file is kept."""
    db = tmp_path / "lost.db"
    body = _encoder.encode((_journal_format._SESSION, (5, _session(0, _journal_format._NO_AGENT))))
    segment = Path(f"{db}.af-journal-999999-dead-00000001")
    head = _existing(db)
    segment.write_bytes(head + _FRAME.pack(len(body), zlib.crc32(body)) + body)
    with pytest.raises(StoreError, match="af-journal-999999-dead-00000001"):
        asyncio.run(_write(db, []))
    assert segment.exists()


def _frame(kind: int, item: object) -> bytes:
    payload = _encoder.encode((kind, item))
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def test_a_segment_of_the_previous_format_is_still_ingested(tmp_path: Path) -> None:
    """A journal left by a killed run of the previous release (header AFJ2, every
    session's frame holding its agent) is committed by this one."""
    db = tmp_path / "old.db"
    agent = _agent()
    frames = [
        _frame(
            _KIND[RunStarted], RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=2)
        ),
        _frame(_KIND[SessionStarted], _session(0, agent)),
        _frame(_KIND[SessionStarted], _session(1, agent)),
    ]  # fmt: skip
    kind, values = prepare(tool_result(0))  # type: ignore[misc]
    frames.append(_frame(_ROWS + kind, values))
    _existing(db)  # (beside a database the open makes, a segment with no id is foreign)
    Path(f"{db}.af-journal-999999-beef-00000001").write_bytes(b"AFJ2\0\0\0\0" + b"".join(frames))
    asyncio.run(_write(db, []))  # opening ingests it
    assert [s[0] for s in _stored(db)] == ["s0", "s1"]
    assert _segments(db) == []


def test_agents_sharing_a_prompt_write_it_once(tmp_path: Path) -> None:
    """12 agents, 8 with one prompt (one string, and equal strings built apart) and 4 with
    another: two texts' frames, 12 agents' frames, and every session reads back with its
    agent's whole prompt."""
    db = tmp_path / "shared.db"
    other = "You write tests first. " * 500
    prompts = [PROMPT] * 4 + ["".join(["You review code carefully. "] * 800)] * 4 + [other] * 4
    agents = [
        AgentInfo(name=f"a{i}", fingerprint=f"fp-{i}", instructions=p, config={"i": i})
        for i, p in enumerate(prompts)
    ]
    sessions = [_session(i, a) for i, a in enumerate(agents)]

    data = _live_segment(db, sessions)
    kinds = _kinds(data)
    assert kinds.count(_journal_format._TEXT) == 2
    assert kinds.count(_journal_format._AGENT_TEXT) == 12
    assert len(data.rstrip(b"\0")) < len(PROMPT) + len(other) + 12 * 1024
    read = [r for _, r in _journal_ingest.frames(data, len(_journal_format._MAGIC))]
    assert [
        (r.agent.name, r.agent.instructions) for r in read if isinstance(r, SessionStarted)
    ] == [(a.name, a.instructions) for a in agents]
    assert [s[0] for s in _stored(db)] == [s.session_id for s in sessions]


def test_a_segment_whose_agents_hold_their_prompt_is_still_ingested(tmp_path: Path) -> None:
    """A journal left by a killed run of the previous release (header AFJ3, each agent's
    frame holding its prompt) is committed by this one."""
    db = tmp_path / "afj3.db"
    agent = _agent()
    run = RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=2)
    stub = _session(0, _journal_format._NO_AGENT)
    frames = [
        _frame(_KIND[RunStarted], run),
        _frame(_journal_format._AGENT, (0, agent)),
        _frame(_journal_format._SESSION, (0, stub)),
        _frame(_journal_format._SESSION, (0, _session(1, _journal_format._NO_AGENT))),
    ]
    data = b"AFJ3\0\0\0\0" + b"".join(frames)
    read = [r for _, r in _journal_ingest.frames(data, len(_journal_format._MAGIC))]
    assert [r.agent for r in read if isinstance(r, SessionStarted)] == [agent, agent]
    _existing(db)
    Path(f"{db}.af-journal-999999-f00d-00000001").write_bytes(data)
    asyncio.run(_write(db, []))  # opening ingests it
    assert [s[:2] for s in _stored(db)] == [("s0", "reviewer"), ("s1", "reviewer")]
    assert _segments(db) == []


def test_a_segment_of_an_unknown_format_is_refused_by_name(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    segment = Path(f"{db}.af-journal-999999-cafe-00000001")
    segment.write_bytes(b"AFJ9\0\0\0\0" + b"\0" * 64)
    with pytest.raises(StoreError, match=r"af-journal-999999-cafe-00000001.*AFJ9"):
        asyncio.run(_write(db, []))
    assert segment.exists()
