"""THE PostgreSQL crash test: two worker processes resume one run of 200 tool-calling
sessions at once, sharing it through their leases, and are SIGKILLed — one of them or
both — at 20 seeded moments; each killed worker is replaced by a new one that resumes
the run too (taking over the dead one's sessions once their leases expire, as does the
surviving worker). The store ends as an uninterrupted run's: the same turns and
messages, no turn recorded twice (no conflict, not even a fenced write), and no tool
call that was recorded when a worker started executed by it again.

Cost: ~32 child processes (the uninterrupted run, the first worker, one or two
replacements per kill) of ~1 s of CPU each — start-up is most of it; the fleet runs on
the in-process simulator in virtual time; workers waiting for an expired lease block
rather than spin — measured 33 s user + 7 s system, 27 s wall on 2 cores under load
(PostgreSQL's start included). Marked ``slow``.
"""

from __future__ import annotations

import json
import queue
import random
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentflow.testing import PostgresServer

from ..wait import wait_for
from .test_crash import GUARD_S, KILLS, SESSIONS, _child, _executions, err_path

pytestmark = pytest.mark.slow

TTL_S = 1.5  # short, so that dead workers' sessions are taken over soon
RUN = "crash"


class Worker:
    """A crash_child process and a thread that reads its lines into a queue."""

    def __init__(self, dsn: str, side: Path, generation: int, lines: queue.Queue[Any]) -> None:
        self.generation = generation
        self.err = err_path(side, generation)
        self.proc = _child(dsn, side, generation, TTL_S)
        self.reader = threading.Thread(target=self._read, args=(lines,), daemon=True)
        self.reader.start()

    def _read(self, lines: queue.Queue[Any]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            lines.put((self, line.strip()))
        lines.put((self, "eof"))

    def kill(self) -> str:
        """SIGKILL it (if it still runs); its stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=GUARD_S)
        self.reader.join(timeout=GUARD_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return self.err.read_text()


def _query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET search_path TO agentflow")
        return conn.execute(sql, (RUN,)).fetchall()


def _contents(dsn: str) -> dict[str, Any]:
    """As tests/store/fleets.contents, from PostgreSQL."""
    return {
        "sessions": {
            sid: (st, final, n)
            for sid, st, final, n in _query(
                dsn, "SELECT session_id, status, final_output, turns FROM sessions WHERE run_id=%s"
            )
        },
        "turns": sorted(
            _query(dsn, "SELECT session_id, turn, message, rewrite FROM turns WHERE run_id=%s")
        ),
        "tools": sorted(
            _query(
                dsn,
                "SELECT session_id, call_id, turn, name, arguments, output, is_error "
                "FROM tool_calls WHERE run_id=%s",
            )
        ),
    }


def _recorded_calls(dsn: str) -> set[tuple[str, int, str, int]]:
    rows = _query(
        dsn, "SELECT session_id, turn, arguments FROM tool_calls WHERE run_id=%s AND NOT is_error"
    )
    out = set()
    for sid, turn, args in rows:
        a = json.loads(args)
        out.add((sid, turn, a["key"], a.get("count", 1)))
    return out


def _turn_count(dsn: str) -> int:
    """Turns committed so far (0 before the first worker created the tables)."""
    try:
        return int(_query(dsn, "SELECT count(*) FROM turns WHERE run_id=%s")[0][0])
    except psycopg.Error:
        return 0


def _wait_turns_over(dsn: str, before: int, kills: int) -> None:
    """Until more than ``before`` turns are committed."""
    wait_for(lambda: _turn_count(dsn) > before, f"a turn committed before kill {kills}")


def _finish(workers: list[Worker], lines: queue.Queue[Any]) -> list[str]:
    """Wait for every worker's last line; their outcomes."""
    outcome: dict[Worker, str] = {}
    while len(outcome) < len(workers):
        try:
            w, line = lines.get(timeout=GUARD_S * 2)
        except queue.Empty:
            stuck = [w for w in workers if w not in outcome]
            raise AssertionError(
                f"gave up after {GUARD_S * 2:g} s waiting for workers "
                f"{[w.generation for w in stuck]} to end; their stderr: "
                + " | ".join(w.kill()[-2000:] for w in stuck)
            ) from None
        if w in workers and (line in ("eof", "done") or line.startswith("failed")):
            outcome.setdefault(w, line)
    return [outcome[w] for w in workers]


def test_two_workers_sigkilled_twenty_times_end_as_an_uninterrupted_run(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    whole_dsn = postgres_server.create_database("crash_whole")
    lines: queue.Queue[Any] = queue.Queue()
    whole = Worker(whole_dsn, tmp_path / "whole.side", 0, lines)
    try:
        assert _finish([whole], lines) == ["done"], whole.kill()[-3000:]
    finally:
        whole.kill()
    want = _contents(whole_dsn)
    total_turns = len(want["turns"])
    assert total_turns > 2 * SESSIONS
    assert len(_executions(tmp_path / "whole.side")) == sum(1 for t in want["tools"] if not t[6])

    dsn, side = postgres_server.create_database("crash"), tmp_path / "crash.side"
    rng = random.Random(13)
    recorded_at_start: dict[int, set[tuple[str, int, str, int]]] = {}
    generation = 0

    def start() -> Worker:
        nonlocal generation
        recorded_at_start[generation] = _recorded_calls(dsn) if generation else set()
        w = Worker(dsn, side, generation, lines)
        generation += 1
        return w

    live: list[Worker] = [start()]  # the first creates the run (and holds every session)
    kills = 0
    try:
        while kills < KILLS:
            target = rng.randint(1, max(2, total_turns // (2 * KILLS)))
            before = _turn_count(dsn)
            seen, finished = 0, False
            while seen < target:
                w, line = lines.get(timeout=GUARD_S)
                if w not in live:
                    continue  # a killed worker's last lines
                if line == "turn":
                    seen += 1
                elif line:
                    finished = True
                    assert line == "done", (line, w.kill()[-3000:])
                    break
            assert not finished, f"the run finished after {kills} kills; kill earlier"
            # Turns end faster than the writers' 10 ms batches: kill once one of them is
            # committed, so every round moves the run on (and the checks below have
            # recorded calls and attempts to check).
            _wait_turns_over(dsn, before, kills)
            victims = live if len(live) == 1 else rng.choice([live[:1], live[1:], live])
            for w in victims:
                err = w.kill()
                assert w.proc.returncode == -signal.SIGKILL, err[-3000:]
            kills += 1
            live = [w for w in live if w not in victims]
            while len(live) < 2:  # replacements resume at once: the run is shared
                live.append(start())
        outcomes = _finish(live, lines)
        assert outcomes == ["done", "done"], [w.kill()[-3000:] for w in live]
    finally:
        for w in live:
            w.kill()

    assert _contents(dsn) == want  # same sessions, turns, messages, tool results
    assert _query(dsn, "SELECT kind, key FROM conflicts WHERE run_id=%s") == []
    assert _query(dsn, "SELECT status FROM runs WHERE run_id=%s") == [("finished",)]
    # One attempt per worker that got as far as starting one (some are killed sooner).
    ((attempts,),) = _query(dsn, "SELECT count(*) FROM run_attempts WHERE run_id=%s")
    assert KILLS // 2 < attempts <= generation
    # The workers that ended gave their leases back; a killed one may still name a session
    # it finished before the kill reached it (between the end's commit and the release):
    # an expired lease on a completed session, which nobody needs again.
    leased = _query(
        dsn, "SELECT status, lease_owner FROM sessions WHERE run_id=%s AND lease_owner IS NOT NULL"
    )
    finishers = {f":{w.proc.pid}:" for w in live}
    assert all(status == "completed" for status, _ in leased), leased
    assert not [o for _, o in leased if any(f in o for f in finishers)], leased
    # The workers shared the run: many attempts recorded turns, and sessions changed hands.
    by_attempt = _query(dsn, "SELECT attempt, count(*) FROM turns WHERE run_id=%s GROUP BY attempt")
    assert len(by_attempt) > KILLS // 2
    handed = _query(
        dsn,
        "SELECT count(*) FROM (SELECT session_id FROM turns WHERE run_id=%s GROUP BY session_id"
        " HAVING count(DISTINCT attempt) > 1) s",
    )
    assert handed[0][0] > 0
    # No worker executed a tool call that was recorded when it started.
    runs = _executions(side)
    for gen, recorded in recorded_at_start.items():
        again = [call for g, call in runs if g == gen and call in recorded]
        assert again == [], f"worker {gen} ran calls recorded before it started: {again[:5]}"
    assert set(Counter(call for _, call in runs)) >= _recorded_calls(dsn)
    assert sum(len(r) for r in recorded_at_start.values()) > 0  # the check is not vacuous
