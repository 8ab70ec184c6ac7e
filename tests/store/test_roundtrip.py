"""A recorded run reads back as it ran: messages, turns, traces and tool results, on the
real simulator; the file is its owner's only; the schema is versioned."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from agentflow import ConfigError, Fleet, RunNotFound, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import SQLiteStore, load_result
from agentflow.store._schema import SCHEMA_VERSION

from .fleets import agents, contents, driver


def _run(path: Path, n: int = 12) -> tuple[object, object]:
    team = agents()

    async def main() -> tuple[object, object]:
        transport = SimTransport(driver())
        store = SQLiteStore(path)
        fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=store)
        try:
            sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(n)]
            result = await fleet.run(sessions, run_config={"kind": "test", "n": n})
            loaded = await load_result(store, result.run_id or "")
            return result, loaded
        finally:
            await store.aclose()
            await transport.aclose()

    return run_virtual(main())


def test_a_recorded_run_reads_back_whole(tmp_path: Path) -> None:
    """Every session's messages, turns (traces, metrics) and status come back from the
    store equal to what the run returned; nothing is recorded twice."""
    path = tmp_path / "runs.db"
    result, loaded = _run(path)
    assert result.run_id and loaded.run_id == result.run_id  # type: ignore[attr-defined]
    ran, back = result.sessions, loaded.sessions  # type: ignore[attr-defined]
    assert [s.session_id for s in back] == [s.session_id for s in ran]
    assert all(s.ok for s in ran)
    assert sum(len(s.turns) for s in ran) >= 12 * 2
    for a, b in zip(ran, back, strict=True):
        assert b.messages == a.messages  # the system prompt once, then every message
        assert [m["role"] for m in b.messages].count("system") == 1
        assert [t.trace for t in b.turns] == [t.trace for t in a.turns]
        assert [t.metrics for t in b.turns] == [t.metrics for t in a.turns]
        assert (b.status, b.final_output) == (a.status, a.final_output)
    # The peak in flight, from the recorded turns' request intervals (not a stand-in 0).
    assert loaded.peak_in_flight == result.peak_in_flight == 4  # type: ignore[attr-defined]
    rows = contents(path, result.run_id)  # type: ignore[attr-defined]
    assert len(rows["turns"]) == sum(len(s.turns) for s in ran)
    calls = [c for s in ran for t in s.turns for c in t.trace.tool_calls]
    assert sorted((r[0], r[1]) for r in rows["tools"]) == sorted(
        (s.session_id, c.id) for s in ran for t in s.turns for c in t.trace.tool_calls
    )
    assert len(calls) > 12


def test_a_turn_row_holds_only_what_the_turn_appended(tmp_path: Path) -> None:
    """The turns table never repeats the context: each row is one assistant message."""
    path = tmp_path / "runs.db"
    _run(path, n=3)
    conn = sqlite3.connect(path)
    try:
        for (message,) in conn.execute("SELECT message FROM turns"):
            assert message.startswith('{"role":"assistant"')
            assert "You look things up" not in message
        ((texts,),) = conn.execute("SELECT COUNT(*) FROM texts")
        assert texts == 1  # three agents, one system prompt, stored once
        (version,) = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        assert version == str(SCHEMA_VERSION)
    finally:
        conn.close()


def test_the_store_file_is_its_owners_only(tmp_path: Path) -> None:
    """The database and its WAL side files are created 0600 whatever the umask."""
    old = os.umask(0o000)
    try:
        path = tmp_path / "deep" / "runs.db"
        _run(path, n=2)
    finally:
        os.umask(old)
    files = [p for p in path.parent.iterdir() if p.name.startswith("runs.db")]
    assert path in files
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


def test_a_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    """A store of a version this agentflow does not read (a newer one's) is an error
    naming both versions, not misread (version 1 is read: ``test_rewrite_delta.py``)."""
    path = tmp_path / "runs.db"
    _run(path, n=1)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    conn.commit()
    conn.close()

    async def main() -> None:
        store = SQLiteStore(path)
        try:
            await store.open()
        finally:
            await store.aclose()

    with pytest.raises(StoreError, match=r"999.*version 2"):
        run_virtual(main())


def test_unknown_runs_and_reused_ids_are_errors(tmp_path: Path) -> None:
    """Loading or resuming an unknown run is RunNotFound; running under a recorded id
    is a ConfigError naming it; run_id without a store too."""
    path = tmp_path / "runs.db"
    result, _ = _run(path, n=1)
    team = agents()

    async def main() -> None:
        transport = SimTransport(driver())
        store = SQLiteStore(path)
        fleet = Fleet(transport, clock=loop_clock, store=store)
        try:
            with pytest.raises(RunNotFound, match="nope"):
                await fleet.resume("nope", agents=team)
            with pytest.raises(ConfigError, match=str(result.run_id)):  # type: ignore[attr-defined]
                await fleet.run([team[0].session("x")], run_id=result.run_id)  # type: ignore[attr-defined]
            with pytest.raises(ConfigError, match="store"):
                await Fleet(transport).run([team[0].session("y")], run_id="r")
        finally:
            await store.aclose()
            await transport.aclose()

    run_virtual(main())


def test_bad_store_settings_are_config_errors(tmp_path: Path) -> None:
    """Out-of-range settings name the field."""
    with pytest.raises(ConfigError, match="max_batch"):
        SQLiteStore(tmp_path / "x.db", max_batch=0)
    with pytest.raises(ConfigError, match="lease_ttl_s"):
        SQLiteStore(tmp_path / "x.db", lease_ttl_s=0)
