"""The SQL of :class:`~agentflow.store.SQLiteStore`: one function per record kind, the
run loader and the leases. Every function runs on the store's writer thread."""

from __future__ import annotations

import dataclasses
import os
import socket
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from agentflow._errors import RunNotFound
from agentflow.store._codec import decode_json, decode_prompt, decode_trace, encode, text_hash
from agentflow.store._protocol import LeaseOwner, RunSummary
from agentflow.store._records import (
    AgentInfo,
    PolicyState,
    Record,
    RunAttempt,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    StoredRun,
    StoredSession,
    StoredToolResult,
    StoredTurn,
    ToolFinished,
    TurnFinished,
)

__all__ = [
    "FINISHED_SQL",
    "TOOL",
    "TURN",
    "Row",
    "claim",
    "conflicts",
    "list_runs",
    "load_run",
    "prepare",
    "read_run",
    "release",
    "renew",
    "start_attempt",
    "write_record",
    "write_records",
]

#: A run's status when an attempt ends: ``finished`` when that attempt ran everything
#: or — several workers sharing the run — when no session is left unfinished in the
#: store, whoever finished it; else ``partial``. Parameters: the attempt's status, the
#: run id.
FINISHED_SQL = (
    "CASE WHEN ? = 'finished' OR NOT EXISTS (SELECT 1 FROM sessions s WHERE s.run_id = ?"
    " AND s.status NOT IN ('completed', 'max_turns')) THEN 'finished' ELSE 'partial' END"
)


_TURN_SQL = "INSERT INTO turns VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_TOOL_SQL = "INSERT INTO tool_calls VALUES (?,?,?,?,?,?,?,?,?,?)"


def write_record(conn: sqlite3.Connection, r: Record) -> None:
    """Write one record (inside the caller's transaction)."""
    if isinstance(r, TurnFinished):
        _turn(conn, r)
    elif isinstance(r, ToolFinished):
        key = f"{r.session_id}/{r.call.id}"
        _insert(conn, "tool_call", key, r.run_id, _TOOL_SQL, _tool_row(r))
    elif isinstance(r, SessionStarted):
        _session(conn, r)
    elif isinstance(r, SessionEnded):
        conn.execute(
            "UPDATE sessions SET status=?, final_output=?, error=?, turns=?, sticky_replica="
            "COALESCE((SELECT replica FROM turns t WHERE t.run_id=sessions.run_id"
            " AND t.session_id=sessions.session_id ORDER BY turn DESC LIMIT 1), sticky_replica)"
            " WHERE run_id=? AND session_id=?",
            (r.status, r.final_output, r.error, r.turns, r.run_id, r.session_id),
        )
    elif isinstance(r, PolicyState):
        conn.execute(
            "INSERT OR REPLACE INTO policy_state VALUES (?,?,?,?)",
            (r.run_id, r.key, encode(r.state), time.time_ns()),
        )
    elif isinstance(r, RunStarted):
        _run_started(conn, r)
    elif isinstance(r, RunEnded):
        conn.execute(
            "UPDATE run_attempts SET ended_wall_ns=?, status=?, retries=?, wall_s=? "
            "WHERE run_id=? AND attempt=?",
            (r.wall_ns, r.status, r.retries, r.wall_s, r.run_id, r.attempt),
        )
        conn.execute(
            f"UPDATE runs SET status={FINISHED_SQL} WHERE run_id=?", (r.status, r.run_id, r.run_id)
        )


def _insert(
    conn: sqlite3.Connection, kind: str, key: str, run_id: str, sql: str, row: tuple[Any, ...]
) -> bool:
    try:
        conn.execute(sql, row)
    except sqlite3.IntegrityError:
        conn.execute("INSERT INTO conflicts VALUES (?,?,?,?)", (run_id, kind, key, time.time_ns()))
        return False
    return True


#: A turn's or tool result's row, made as the record was written (:func:`prepare`):
#: (:data:`TURN` or :data:`TOOL`, the row's values).
Row = tuple[int, tuple[Any, ...]]
TURN, TOOL = 0, 1


def prepare(r: Record) -> Record | Row:
    """What the writer thread is given for ``r`` with the journal: a turn's or tool
    result's row, its JSON columns encoded now — a snapshot of the record as it is
    written (the assistant message is a live dict of the session's), and the one
    encoding both the journal and SQLite use — else ``r`` itself, its free-form
    mappings (a session's task and metadata, its agent's config, a run's config, a
    policy state) replaced by what their JSON decodes to: the journal's MessagePack
    carries exactly what the store's JSON column holds (a key that is not a ``str``
    would fail the record type's decoder at the next open; a datetime would come back
    in UTC)."""
    if isinstance(r, TurnFinished):
        return TURN, _turn_row(r)
    if isinstance(r, ToolFinished):
        return TOOL, _tool_row(r)
    try:
        if isinstance(r, SessionStarted):
            agent = dataclasses.replace(r.agent, config=_as_json(r.agent.config))
            return msgspec.structs.replace(
                r, agent=agent, task=_as_json(r.task), metadata=_as_json(r.metadata)
            )
        if isinstance(r, RunStarted) and r.config is not None:
            return msgspec.structs.replace(r, config=_as_json(r.config))
        if isinstance(r, PolicyState):
            return msgspec.structs.replace(r, state=_as_json(r.state))
    except Exception:  # an object whose repr fails: SQLite's commit says what is wrong
        return r
    return r


def _as_json(value: Any) -> Any:
    """``value`` as its JSON column reads back (the store's one encoding of it)."""
    return decode_json(encode(value))


def write_records(conn: sqlite3.Connection, items: Sequence[Record | Row]) -> None:
    """Write ``items`` — records, or rows :func:`prepare` made — in order (inside the
    caller's transaction): what :func:`write_record` does for each, with the turns and
    tool results between two other records inserted by one ``executemany`` per table —
    their rows depend on nothing else in the batch, and a large batch (the journal's,
    ``store/_journal.py``) pays one statement per table instead of one per row. A group
    that hits a recorded key is written again row by row, so each duplicate becomes its
    conflict row, as :func:`write_record` does."""
    turns: list[tuple[Any, ...]] = []
    tools: list[tuple[Any, ...]] = []
    for it in items:
        if type(it) is tuple:
            (turns if it[0] == TURN else tools).append(it[1])
        elif isinstance(it, TurnFinished):
            turns.append(_turn_row(it))
        elif isinstance(it, ToolFinished):
            tools.append(_tool_row(it))
        else:
            _many(conn, turns, tools)
            turns, tools = [], []
            write_record(conn, it)  # type: ignore[arg-type]
    _many(conn, turns, tools)


def _many(
    conn: sqlite3.Connection, turns: list[tuple[Any, ...]], tools: list[tuple[Any, ...]]
) -> None:
    if not turns and not tools:
        return
    conn.execute("SAVEPOINT many")
    try:
        conn.executemany(_TURN_SQL, turns)
        conn.executemany(_TOOL_SQL, tools)
    except sqlite3.IntegrityError:
        conn.execute("ROLLBACK TO many")
        conn.execute("RELEASE many")
        for row in turns:
            _insert(conn, "turn", f"{row[1]}/{row[2]}", row[0], _TURN_SQL, row)
        for row in tools:
            _insert(conn, "tool_call", f"{row[1]}/{row[2]}", row[0], _TOOL_SQL, row)
        return
    conn.execute("RELEASE many")


def _tool_row(r: ToolFinished) -> tuple[Any, ...]:
    c = r.call
    return (r.run_id, r.session_id, c.id, r.turn, c.name, c.arguments, r.output,
            int(r.is_error), r.duration_s, r.truncated_chars)  # fmt: skip


def _turn(conn: sqlite3.Connection, r: TurnFinished) -> None:
    # One insert, no update of the session's row: its ``turns`` and ``sticky_replica``
    # are set when it ends, and read from its last turn before that (``read_run``) — an
    # update per turn was a sixth of a commit's work.
    key = f"{r.session_id}/{r.turn}"
    _insert(conn, "turn", key, r.run_id, _TURN_SQL, _turn_row(r))


def _turn_row(r: TurnFinished) -> tuple[Any, ...]:
    m, t = r.metrics, r.trace
    return (
        r.run_id, r.session_id, r.turn, r.attempt, encode(r.message),
        None if r.rewrite is None else encode(r.rewrite), r.ready_ns,
        m.prompt_tokens, m.cached_tokens, m.output_tokens, m.ttft_s, m.e2e_s, m.queue_wait_s,
        r.failed_attempts, encode(r.failures) if r.failures else None,
        None if r.prompt is None else encode(r.prompt), t.endpoint, encode(t),
    )  # fmt: skip


def _session(conn: sqlite3.Connection, r: SessionStarted) -> None:
    a = r.agent
    h = text_hash(a.instructions)
    conn.execute("INSERT OR IGNORE INTO texts VALUES (?,?)", (h, a.instructions))
    known = conn.execute(
        "SELECT fingerprint FROM agents WHERE run_id=? AND name=?", (r.run_id, a.name)
    ).fetchone()
    if known is None:
        conn.execute(
            "INSERT INTO agents VALUES (?,?,?,?,?)",
            (r.run_id, a.name, a.fingerprint, h, encode(a.config)),
        )
    elif known[0] != a.fingerprint:
        key = f"agent {a.name}: two configurations in one run"
        conn.execute(
            "INSERT INTO conflicts VALUES (?,?,?,?)", (r.run_id, "agent", key, time.time_ns())
        )
    _insert(
        conn,
        "session",
        r.session_id,
        r.run_id,
        "INSERT INTO sessions (run_id, session_id, position, agent, fingerprint, task, metadata,"
        " status) VALUES (?,?,?,?,?,?,?, 'pending')",
        (r.run_id, r.session_id, r.position, a.name, a.fingerprint, encode(r.task),
         encode(r.metadata)),
    )  # fmt: skip


def _run_started(conn: sqlite3.Connection, r: RunStarted) -> None:
    if r.attempt == 0:
        _insert(
            conn,
            "run",
            r.run_id,
            r.run_id,
            "INSERT INTO runs VALUES (?,?, 'running', ?, ?)",
            (r.run_id, r.wall_ns, r.sessions, None if r.config is None else encode(r.config)),
        )
    else:
        conn.execute("UPDATE runs SET status='running' WHERE run_id=?", (r.run_id,))
    _insert(
        conn,
        "attempt",
        f"{r.run_id}#{r.attempt}",
        r.run_id,
        "INSERT INTO run_attempts (run_id, attempt, wall_ns, clock_ns) VALUES (?,?,?,?)",
        (r.run_id, r.attempt, r.wall_ns, r.clock_ns),
    )


def load_run(
    conn: sqlite3.Connection, run_id: str, where: str, only: Sequence[str] | None = None
) -> StoredRun:
    """Read a run, or only the sessions ``only`` of it (one read transaction: a
    consistent snapshot)."""
    conn.execute("BEGIN")
    try:
        return read_run(conn, run_id, where, only)
    finally:
        conn.execute("COMMIT")


def read_run(conn: Any, run_id: str, where: str, only: Sequence[str] | None = None) -> StoredRun:
    """The queries of :func:`load_run`, on any DB-API-like connection whose ``execute``
    takes ``?`` placeholders (the PostgreSQL store passes an adapter)."""
    picked, sel = "", tuple[str, ...]()
    if only is not None:
        picked, sel = f" AND session_id IN ({','.join('?' * len(only))})", tuple(only)
        if not only:
            picked = " AND 0=1"
    row = conn.execute("SELECT status, config FROM runs WHERE run_id=?", (run_id,)).fetchone()
    if row is None:
        raise RunNotFound(run_id, where)
    status, config = row
    attempts = [
        RunAttempt(
            attempt=a, wall_ns=w, clock_ns=c, ended_wall_ns=e, status=s, retries=n, wall_s=ws
        )
        for a, w, c, e, s, n, ws in conn.execute(
            "SELECT attempt, wall_ns, clock_ns, ended_wall_ns, status, retries, wall_s "
            "FROM run_attempts WHERE run_id=? ORDER BY attempt",
            (run_id,),
        )
    ]
    agents = {
        name: AgentInfo(name=name, fingerprint=fp, instructions=text, config=decode_json(cfg))
        for name, fp, text, cfg in conn.execute(
            "SELECT a.name, a.fingerprint, t.text, a.config FROM agents a "
            "JOIN texts t ON t.hash = a.instructions_hash WHERE a.run_id=?",
            (run_id,),
        )
    }
    sessions: dict[str, StoredSession] = {}
    for sid, pos, agent, fp, task, meta, st, final, err, sticky in conn.execute(
        "SELECT session_id, position, agent, fingerprint, task, metadata, status, final_output,"
        f" error, sticky_replica FROM sessions WHERE run_id=?{picked} ORDER BY position",
        (run_id, *sel),
    ):
        sessions[sid] = StoredSession(
            session_id=sid, position=pos, agent=agent, fingerprint=fp, task=decode_json(task),
            metadata=decode_json(meta), status=st, final_output=final, error=err,
            sticky_replica=sticky,
        )  # fmt: skip
    turns: dict[tuple[str, int], StoredTurn] = {}
    for sid, n, att, msg, rewrite, ready, failed, prompt, trace in conn.execute(
        "SELECT session_id, turn, attempt, message, rewrite, ready_ns, failed_attempts, prompt,"
        f" trace FROM turns WHERE run_id=?{picked} ORDER BY session_id, turn",
        (run_id, *sel),
    ):
        st_turn = StoredTurn(
            turn=n, attempt=att, message=decode_json(msg), rewrite=decode_json(rewrite),
            ready_ns=ready, trace=decode_trace(trace), prompt=decode_prompt(prompt),
            failed_attempts=failed,
        )  # fmt: skip
        turns[sid, n] = st_turn
        if sid in sessions:
            sessions[sid].turns.append(st_turn)
    for s in sessions.values():  # the endpoint of its last turn (SQLite updates the
        if s.turns:  # column only when the session ends)
            s.sticky_replica = s.turns[-1].trace.endpoint or s.sticky_replica
    for sid, call_id, n, name, args, out, is_err, dur, cut in conn.execute(
        "SELECT session_id, call_id, turn, name, arguments, output, is_error, duration_s,"
        f" truncated_chars FROM tool_calls WHERE run_id=?{picked}",
        (run_id, *sel),
    ):
        owner = turns.get((sid, n))
        if owner is not None:
            owner.tool_results[call_id] = StoredToolResult(
                call_id=call_id, name=name, arguments=args, output=out, is_error=bool(is_err),
                duration_s=dur, truncated_chars=cut,
            )  # fmt: skip
    policy = {
        key: decode_json(state)
        for key, state in conn.execute(
            "SELECT key, state FROM policy_state WHERE run_id=?", (run_id,)
        )
    }
    return StoredRun(
        run_id=run_id,
        config=decode_json(config),
        status=status,
        attempts=attempts,
        agents=agents,
        sessions=list(sessions.values()),
        policy_state=policy,
    )


def start_attempt(
    conn: sqlite3.Connection, run_id: str, wall_ns: int, clock_ns: int, where: str
) -> int:
    """Record the next attempt at ``run_id`` and return its number (one write
    transaction, so two processes never get the same number)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is None:
            raise RunNotFound(run_id, where)
        (attempt,) = conn.execute(
            "SELECT COALESCE(MAX(attempt), -1) + 1 FROM run_attempts WHERE run_id=?", (run_id,)
        ).fetchone()
        conn.execute(
            "INSERT INTO run_attempts (run_id, attempt, wall_ns, clock_ns) VALUES (?,?,?,?)",
            (run_id, attempt, wall_ns, clock_ns),
        )
        conn.execute("UPDATE runs SET status='running' WHERE run_id=?", (run_id,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(attempt)


def list_runs(conn: Any) -> list[RunSummary]:
    """Every run, newest first, with its session and turn counts."""
    rows = conn.execute(
        "SELECT r.run_id, r.status, r.created_wall_ns, r.sessions,"
        " (SELECT COUNT(*) FROM sessions s WHERE s.run_id=r.run_id"
        "   AND s.status IN ('completed','max_turns')),"
        " (SELECT COUNT(*) FROM turns t WHERE t.run_id=r.run_id),"
        " (SELECT COUNT(*) FROM run_attempts a WHERE a.run_id=r.run_id)"
        " FROM runs r ORDER BY r.created_wall_ns DESC"
    ).fetchall()
    return [
        RunSummary(run_id=a, status=b, created_wall_ns=c, sessions=d, sessions_done=e, turns=f,
                   attempts=g)
        for a, b, c, d, e, f, g in rows
    ]  # fmt: skip


def _free(holder: str | None, expires: int | None, me: str, now: int) -> bool:
    if holder is None or holder == me or expires is None or expires < now:
        return True
    try:
        other = LeaseOwner.parse(holder)
    except ValueError:
        return False
    if other.host != socket.gethostname():
        return False
    if other.pid == os.getpid():
        return True  # an earlier run in this very process, which has ended or been cancelled
    try:
        os.kill(other.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def claim(
    conn: sqlite3.Connection, run_id: str, ids: list[str], owner: LeaseOwner, ttl_s: float
) -> list[str]:
    """Take the free leases among ``ids`` (one write transaction)."""
    me, now = str(owner), time.time_ns()
    expires = now + int(ttl_s * 1e9)
    got: list[str] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sid in ids:
            row = conn.execute(
                "SELECT lease_owner, lease_expires_ns FROM sessions "
                "WHERE run_id=? AND session_id=?",
                (run_id, sid),
            ).fetchone()
            if row is None or not _free(row[0], row[1], me, now):
                continue
            conn.execute(
                "UPDATE sessions SET lease_owner=?, lease_expires_ns=? "
                "WHERE run_id=? AND session_id=?",
                (me, expires, run_id, sid),
            )
            got.append(sid)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return got


def renew(conn: sqlite3.Connection, run_id: str, owner: LeaseOwner, ttl_s: float) -> list[str]:
    """Extend ``owner``'s leases; returns the ids it holds."""
    me = str(owner)
    expires = time.time_ns() + int(ttl_s * 1e9)
    conn.execute(
        "UPDATE sessions SET lease_expires_ns=? WHERE run_id=? AND lease_owner=?",
        (expires, run_id, me),
    )
    rows = conn.execute(
        "SELECT session_id FROM sessions WHERE run_id=? AND lease_owner=?", (run_id, me)
    )
    return [r[0] for r in rows]


def release(
    conn: sqlite3.Connection, run_id: str, owner: LeaseOwner, ids: list[str] | None = None
) -> None:
    """Free ``owner``'s leases (those of ``ids`` only, if given)."""
    sql = (
        "UPDATE sessions SET lease_owner=NULL, lease_expires_ns=NULL "
        "WHERE run_id=? AND lease_owner=?"
    )
    if ids is None:
        conn.execute(sql, (run_id, str(owner)))
        return
    for sid in ids:
        conn.execute(sql + " AND session_id=?", (run_id, str(owner), sid))


def conflicts(conn: sqlite3.Connection, run_id: str) -> list[str]:
    """The refused duplicate writes of a run, as ``kind key`` lines."""
    rows = conn.execute(
        "SELECT kind, key FROM conflicts WHERE run_id=? ORDER BY wall_ns", (run_id,)
    )
    return [f"{k} {key}" for k, key in rows]
