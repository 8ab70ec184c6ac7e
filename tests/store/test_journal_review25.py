"""Review of the journal's segment-ahead, agent-frame and fingerprint changes: what a
busy fleet's writer thread does between hand-overs, and how ingestion reads a segment
whose agents' frames precede its marker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from agentflow.store import (
    AgentInfo,
    RunStarted,
    SessionStarted,
    SQLiteStore,
    _journal,
    _journal_format,
)
from agentflow.store import _journal_ingest as ingest
from agentflow.store._journal_format import _FRAME, _encoder
from agentflow.store._sqlite_write import prepare

from .journal_child import tool_result
from .journal_review25_child import PROMPTS
from .test_journal import _open_close, _segments
from .test_journal_review import _rows

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


def test_a_busy_loop_finds_its_next_segment_made_by_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records handed over in full batches (``max_batch``) and flushes keep the writer
    from ever waiting out its interval: it must still make the loop's next segment ahead
    (and map in its next pages) after those commits, not only after an idle interval —
    else every segment past the first is made, reserved and zero-filled on the loop."""
    monkeypatch.setattr(_journal, "SEGMENT_BYTES", 64 << 10)
    made: list[bool] = []  # per segment made: on the event loop's thread?
    make = _journal.Journal._make

    def counted(self: _journal.Journal, size: int, fill: int) -> object:
        made.append(threading.current_thread() is threading.main_thread())
        return make(self, size, fill)

    monkeypatch.setattr(_journal.Journal, "_make", counted)
    db = tmp_path / "busy.db"

    async def main() -> int:
        store = SQLiteStore(db, batch_interval_s=10, max_batch=16)
        await store.open()
        store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
        for i in range(1200):  # ~0.4 MB: several 64 KiB segments
            store.write(tool_result(i))
            if i % 16 == 15:
                await store.flush()
        await store.aclose()
        return store.committed

    assert asyncio.run(main()) == 1201
    assert len(made) >= 4  # segments rotated
    assert made.count(True) == 0, f"{made.count(True)} of {len(made)} segments made on the loop"


def _frame(kind: int, item: object) -> bytes:
    payload = _encoder.encode((kind, item))
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def test_a_kill_between_an_agents_frame_and_its_sessions_ingests_what_precedes(
    tmp_path: Path,
) -> None:
    """A segment that ends with an agent's frame (killed before the session's frame) is
    ingested up to the last record, and its marker stays before the agent's frame."""
    agent = AgentInfo(name="a", fingerprint="f", instructions="p" * 100, config={})
    s0 = prepare(
        SessionStarted(run_id="r", session_id="s0", position=0, agent=agent, task=[], metadata={})
    )
    assert isinstance(s0, SessionStarted)
    stub = SessionStarted(
        run_id="r",
        session_id="s0",
        position=0,
        agent=_journal_format._NO_AGENT,
        task=[],
        metadata={},
    )
    run = _frame(0 + _journal_format._KIND[RunStarted], RunStarted(run_id="r", attempt=0, wall_ns=1,
                 clock_ns=0, sessions=1))  # fmt: skip
    head = _frame(_journal_format._AGENT, (0, s0.agent))
    body = _frame(_journal_format._SESSION, (0, stub))
    data = (
        _journal_format._MAGIC + run + head + body + _frame(_journal_format._AGENT, (1, s0.agent))
    )
    read = list(ingest.frames(data, len(_journal_format._MAGIC)))
    assert [type(r).__name__ for _, r in read] == ["RunStarted", "SessionStarted"]
    assert read[-1][0] == len(_journal_format._MAGIC) + len(run) + len(head) + len(body)
    # From a marker after the session: nothing more (the trailing agent yields nothing).
    assert list(ingest.frames(data, read[-1][0])) == []


def test_sessions_after_a_commit_and_a_kill_are_stored_once_with_their_agents(
    tmp_path: Path,
) -> None:
    """A writer killed after two commits, with sessions whose agents' frames precede the
    marker, in segments that rotate between sessions: the next open stores every
    session once, each with its own agent's full prompt, and every tool result once."""
    for segment_bytes in (8 << 20, 48 << 10):
        db = tmp_path / f"kill-{segment_bytes}.db"
        proc = subprocess.run(
            [sys.executable, "-m", "tests.store.journal_review25_child", "agents", str(db),
             str(segment_bytes)],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == -9, proc.stderr[-3000:]
        assert _segments(db), "the kill left a journal"
        asyncio.run(_open_close(db))
        assert _segments(db) == []
        rows = _rows(
            db,
            "SELECT s.session_id, s.agent, s.fingerprint, t.text FROM sessions s JOIN agents a"
            " ON a.run_id=s.run_id AND a.name=s.agent JOIN texts t ON t.hash=a.instructions_hash"
            " ORDER BY s.position",
        )
        want = [(f"s{i}", "ab"[i % 2], "fp-" + "ab"[i % 2]) for i in range(10)]
        assert [r[:3] for r in rows] == want
        assert all(text == PROMPTS[str(a)] for _, a, _, text in rows)
        assert _rows(db, "SELECT count(*) FROM conflicts") == [(0,)]
        assert _rows(db, "SELECT count(*), count(DISTINCT turn) FROM tool_calls") == [(320, 320)]


@pytest.mark.parametrize("lost", ["agent", "text"])
def test_an_agents_frame_lost_before_the_marker_ends_the_journal_there(
    tmp_path: Path, lost: str
) -> None:
    """An operating-system crash may lose a page of the journal that was written before
    SQLite's last commit (the journal's and the database's pages reach the disk in no set
    order): here the frame of agent ``a``, or of its instructions' text, before the
    marker, reads as zeros. The sessions
    after the marker that refer to it cannot be read back — that is where the journal
    ends (an OS crash "may lose the last writes"); the store still opens, with what was
    committed, instead of refusing to open until the segment is moved aside."""
    db = tmp_path / "crash.db"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.store.journal_review25_child", "agents", str(db),
         str(8 << 20)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == -9, proc.stderr[-3000:]
    (segment,) = _segments(db)
    data = bytearray(Path(segment).read_bytes())
    pos = len(_journal_format._MAGIC)
    kind = _journal_format._AGENT_TEXT if lost == "agent" else _journal_format._TEXT
    while True:  # the first such frame: agent a's, or its text's
        n, _ = _FRAME.unpack_from(data, pos)
        if _journal_format._frame_decoder.decode(data[pos + 8 : pos + 8 + n])[0] == kind:
            break
        pos += _FRAME.size + n
    data[pos : pos + _FRAME.size + n] = bytes(_FRAME.size + n)
    Path(segment).write_bytes(data)
    asyncio.run(_open_close(db))  # no StoreError
    assert _segments(db) == []
    sessions = _rows(db, "SELECT session_id FROM sessions ORDER BY position")
    assert sessions == [(f"s{i}",) for i in range(6)]  # the flushes' sessions
    assert _rows(db, "SELECT count(*) FROM tool_calls") == [(4 * 40,)]
