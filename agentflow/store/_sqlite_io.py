"""The SQL of :class:`~agentflow.store.SQLiteStore` that reads and holds: the run loader,
attempts and the leases (what writes records is ``_sqlite_write.py``, whose names are
imported here too). Every function runs on the store's writer thread."""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agentflow._errors import RunNotFound, StoreError
from agentflow.store._codec import decode_json, decode_prompt, decode_trace
from agentflow.store._protocol import LeaseOwner, RunSummary
from agentflow.store._records import (
    AgentInfo,
    RunAttempt,
    StoredRun,
    StoredSession,
    StoredToolResult,
    StoredTurn,
    check_name,
)
from agentflow.store._runlock import live_owner
from agentflow.store._sqlite_write import (
    FINISHED_SQL,
    TOOL,
    TURN,
    Row,
    prepare,
    rollback,
    write_record,
    write_records,
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


#: How many sessions :func:`read_run` asks for in one query, unless told (SQLite
#: builds before 3.32 took 999 parameters a statement).
CHUNK = 900


def load_run(
    conn: sqlite3.Connection, run_id: str, where: str, only: Sequence[str] | None = None
) -> StoredRun:
    """Read a run, or only the sessions ``only`` of it (one read transaction: a
    consistent snapshot)."""
    conn.execute("BEGIN")
    try:  # (each query's ids fewer than this build of SQLite takes in one statement)
        chunk = max(1, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) - 1)
        return read_run(conn, run_id, where, only, chunk=chunk)
    finally:
        if conn.in_transaction:  # (an I/O error may have ended it)
            conn.execute("COMMIT")


def read_run(
    conn: Any, run_id: str, where: str, only: Sequence[str] | None = None, *, chunk: int = CHUNK
) -> StoredRun:
    """The queries of :func:`load_run`, on any DB-API-like connection whose ``execute``
    takes ``?`` placeholders (the PostgreSQL store passes an adapter). A ``run_id``
    holding a NUL or a lone surrogate is a :class:`ConfigError` on either store
    (:func:`check_name`). The sessions of ``only`` are asked for ``chunk`` at a time: a
    database takes a bounded number of parameters in one statement (SQLite 32,766 by
    default, PostgreSQL 65,535), and a resume with workers loads every session it runs
    at once."""
    check_name(run_id, "run_id")
    ids = None if only is None else list(dict.fromkeys(only))
    row = conn.execute(
        "SELECT status, config, created_wall_ns FROM runs WHERE run_id=?", (run_id,)
    ).fetchone()
    if row is None:
        raise RunNotFound(run_id, where)
    status, config, created = row
    run_config = _read(where, run_id, "", ("runs.config", decode_json, config))
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
    agents: dict[str, AgentInfo] = {}
    for name, fp, text, cfg in conn.execute(
        "SELECT a.name, a.fingerprint, t.text, a.config FROM agents a "
        "JOIN texts t ON t.hash = a.instructions_hash WHERE a.run_id=?",
        (run_id,),
    ):
        cfg_v = _read(where, run_id, f", agent {name!r}", ("agents.config", decode_json, cfg))
        agents[name] = AgentInfo(name=name, fingerprint=fp, instructions=text, config=cfg_v)
    sessions: dict[str, StoredSession] = {}
    for sid, pos, agent, fp, task, meta, st, final, err, sticky in _select(
        conn,
        "SELECT session_id, position, agent, fingerprint, task, metadata, status, final_output,"
        " error, sticky_replica FROM sessions WHERE run_id=?{picked} ORDER BY position",
        run_id, ids, chunk,
    ):  # fmt: skip
        task_v, meta_v = _read(where, run_id, f", session {sid!r}",
                               ("sessions.task", decode_json, task),
                               ("sessions.metadata", decode_json, meta))  # fmt: skip
        sessions[sid] = StoredSession(
            session_id=sid, position=pos, agent=agent, fingerprint=fp, task=task_v,
            metadata=meta_v, status=st, final_output=final, error=err, sticky_replica=sticky,
        )  # fmt: skip
    turns: dict[tuple[str, int], StoredTurn] = {}
    for sid, n, att, msg, rewrite, ready, failed, failures, prompt, trace in _select(
        conn,
        "SELECT session_id, turn, attempt, message, rewrite, ready_ns, failed_attempts, failures,"
        " prompt, trace FROM turns WHERE run_id=?{picked} ORDER BY session_id, turn",
        run_id, ids, chunk,
    ):  # fmt: skip
        try:
            st_turn = StoredTurn(
                turn=n, attempt=att, message=decode_json(msg), rewrite=decode_json(rewrite),
                ready_ns=ready, trace=decode_trace(trace), prompt=decode_prompt(prompt),
                failed_attempts=failed, failures=_failures(failures),
            )  # fmt: skip
        except _UNREADABLE:  # (named only then: a load of a whole run pays nothing)
            _read(where, run_id, f", session {sid!r}, turn {n}",
                  ("turns.message", decode_json, msg), ("turns.rewrite", decode_json, rewrite),
                  ("turns.failures", _failures, failures), ("turns.prompt", decode_prompt, prompt),
                  ("turns.trace", decode_trace, trace))  # fmt: skip
            raise
        turns[sid, n] = st_turn
        if sid in sessions:
            sessions[sid].turns.append(st_turn)
    for s in sessions.values():  # the endpoint of its last turn (SQLite updates the
        if s.turns:  # column only when the session ends)
            s.sticky_replica = s.turns[-1].trace.endpoint or s.sticky_replica
    for sid, call_id, n, name, args, out, is_err, dur, cut in _select(
        conn,
        "SELECT session_id, call_id, turn, name, arguments, output, is_error, duration_s,"
        " truncated_chars FROM tool_calls WHERE run_id=?{picked}",
        run_id, ids, chunk,
    ):  # fmt: skip
        owner = turns.get((sid, n))
        if owner is not None:
            owner.tool_results[call_id] = StoredToolResult(
                call_id=call_id, name=name, arguments=args, output=out, is_error=bool(is_err),
                duration_s=dur, truncated_chars=cut,
            )  # fmt: skip
    policy = {
        key: _read(where, run_id, f", policy state {key!r}", ("policy_state.state", decode_json, v))
        for key, v in conn.execute("SELECT key, state FROM policy_state WHERE run_id=?", (run_id,))
    }
    return StoredRun(
        run_id=run_id,
        config=run_config,
        status=status,
        attempts=attempts,
        agents=agents,
        # (In the run's order: each chunk's are, not the chunks.)
        sessions=sorted(sessions.values(), key=lambda s: s.position),
        policy_state=policy,
        created_wall_ns=created,
    )


def _select(conn: Any, sql: str, run_id: str, ids: list[str] | None, chunk: int) -> Iterator[Any]:
    """The rows of ``sql`` (its ``{picked}``: where the sessions are picked) for the whole
    run, or for the sessions ``ids``, ``chunk`` of them a query."""
    if ids is None:
        yield from conn.execute(sql.replace("{picked}", ""), (run_id,))
        return
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        picked = f" AND session_id IN ({','.join('?' * len(part))})"
        yield from conn.execute(sql.replace("{picked}", picked), (run_id, *part))


#: What a column that is not the JSON its reader expects raises as it is decoded.
_UNREADABLE = (ValueError, TypeError)  # (msgspec's DecodeError is a ValueError)


def _failures(text: str | None) -> tuple[str, ...]:
    return tuple(decode_json(text) or ())


def _read(
    where: str, run_id: str, place: str, *columns: tuple[str, Callable[[Any], Any], Any]
) -> Any:
    """Each of ``columns`` (name, decoder, text) decoded; one value, or a tuple of them.

    Raises:
        StoreError: naming the run, ``place`` in it and the column, when one cannot be
            decoded (a damaged row, or one another program wrote): a bare decoder error
            named none of them.
    """
    out = []
    for name, decode, text in columns:
        try:
            out.append(decode(text))
        except _UNREADABLE as exc:
            raise StoreError(
                f"{where}: run {run_id!r}{place}: column {name} cannot be read: {exc}"
            ) from exc
    return out[0] if len(out) == 1 else tuple(out)


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
        rollback(conn)
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
    if other.pid == os.getpid():  # an earlier attempt in this very process: free once it
        return not live_owner(holder)  # ended or was cancelled, not while it runs
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
        rollback(conn)
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
