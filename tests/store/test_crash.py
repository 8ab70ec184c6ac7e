"""THE crash test: a fleet of 200 tool-calling sessions in a child process, SIGKILLed at
20 seeded moments and resumed each time, ends with the store of an uninterrupted run:
the same turns and messages, no turn recorded twice, no recorded tool call run again.

Cost: 22 child processes of ~1 s of CPU each (start-up is most of it; the fleet runs on
the in-process simulator in virtual time) — about 25 s of CPU in all (measured: 25 s user,
2 s system on 2 cores under load).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from agentflow.store import SQLiteStore

from .fleets import contents

SESSIONS = 200
KILLS = 20
ROOT = Path(__file__).resolve().parents[2]
GUARD_S = 120.0


def _child(
    db: Path | str, side: Path, generation: int, ttl_s: float | None = None
) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ttl = [] if ttl_s is None else [str(ttl_s)]
    # stderr to a file, not a pipe: a pipe nobody reads until the end blocks a child
    # that writes more than its buffer (its warnings), which would look like a hang.
    with err_path(side, generation).open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.store.crash_child", str(db), str(side),
             str(generation), str(SESSIONS), *ttl],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip


def err_path(side: Path, generation: int) -> Path:
    """Where child ``generation`` writes its stderr."""
    return side.with_name(f"{side.stem}.{generation}.err")


def _wait_turns(proc: subprocess.Popen[str], turns: int) -> str:
    """Read the child's lines until ``turns`` turns ended, or it finished ("done");
    a hang guard kills it after GUARD_S."""
    timer = threading.Timer(GUARD_S, proc.kill)
    timer.start()
    try:
        seen = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("turn"):
                seen += 1
                if seen >= turns:
                    return "killed"
            elif line.strip():
                return line.strip()
        return "eof"
    finally:
        timer.cancel()


def _ingest(db: Path) -> None:
    """Open and close the store, as a resume does first: a killed child's journal is
    committed to ``db`` (so what it recorded is what the checks below read)."""

    async def open_close() -> None:
        store = SQLiteStore(db)
        await store.open()
        await store.aclose()

    if db.exists():
        asyncio.run(open_close())


def _complete(db: Path, side: Path, generation: int) -> None:
    proc = _child(db, side, generation)
    try:
        out, err = proc.communicate(timeout=GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.strip().splitlines()[-1:] == ["done"], err[-3000:]


def _recorded_calls(db: Path) -> set[tuple[str, int, str, int]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT session_id, turn, arguments FROM tool_calls WHERE is_error = 0"
        ).fetchall()
    finally:
        conn.close()
    out = set()
    for sid, turn, args in rows:
        a = json.loads(args)
        out.add((sid, turn, a["key"], a.get("count", 1)))
    return out


def _executions(side: Path) -> list[tuple[int, tuple[str, int, str, int]]]:
    if not side.exists():
        return []
    out = []
    for line in side.read_text().splitlines():
        gen, sid, turn, key, count = json.loads(line)
        out.append((gen, (sid, turn, key, count)))
    return out


def test_sigkill_at_twenty_moments_and_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Kill the child at 20 seeded moments (after a seeded number of finished turns),
    resume each time, then compare with a run that was never killed."""
    whole_db, whole_side = tmp_path / "whole.db", tmp_path / "whole.side"
    _complete(whole_db, whole_side, 0)
    whole = contents(whole_db, "crash")
    total_turns = len(whole["turns"])
    assert total_turns > 2 * SESSIONS
    # Every call with valid arguments ran once (calls cut by max_tokens are tool errors).
    assert len(_executions(whole_side)) == sum(1 for t in whole["tools"] if not t[6]) > SESSIONS

    db, side = tmp_path / "crash.db", tmp_path / "crash.side"
    rng = random.Random(13)
    recorded_at_kill: list[set[tuple[str, int, str, int]]] = []
    kills = 0
    generation = 0
    while kills < KILLS:
        proc = _child(db, side, generation)
        try:
            # A turn is recorded (in the store's journal) before its turn_end event, which
            # prints "turn": every attempt killed after one moves the run on.
            outcome = _wait_turns(proc, rng.randint(1, max(2, total_turns // KILLS)))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=GUARD_S)
            assert proc.stdout is not None
            proc.stdout.close()
            err = err_path(side, generation).read_text()
        assert outcome in ("killed", "done"), (outcome, err[-3000:])
        _ingest(db)
        recorded_at_kill.append(_recorded_calls(db))
        generation += 1
        if outcome == "done":
            break
        kills += 1
    assert kills == KILLS, f"the run finished after {kills} kills; kill earlier"
    _complete(db, side, generation)

    final = contents(db, "crash")
    assert final == whole  # same sessions, turns, messages, tool results
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT COUNT(*) FROM conflicts").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM run_attempts").fetchone() == (generation + 1,)
    finally:
        conn.close()
    # At most once per recorded call: a call recorded before kill k never runs after it.
    runs = _executions(side)
    for k, recorded in enumerate(recorded_at_kill):
        again = [call for gen, call in runs if gen > k and call in recorded]
        assert again == [], f"recorded before kill {k}, run again: {again[:5]}"
    # Every recorded result was produced by some execution; re-runs are only of calls
    # that were not recorded when their run was killed.
    counts = Counter(call for _, call in runs)
    assert set(counts) >= _recorded_calls(db)
    assert all(recorded_at_kill[k] <= recorded_at_kill[k + 1] for k in range(KILLS - 1))
    assert len(recorded_at_kill[KILLS // 2]) > 0  # the check above is not vacuous
