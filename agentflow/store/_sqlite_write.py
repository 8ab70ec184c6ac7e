"""The SQL that writes :class:`~agentflow.store.SQLiteStore`'s records: one function per
record kind, the rows the journal carries (:func:`prepare`), and a batch's inserts
(:func:`write_records`). Every function but :func:`prepare` runs on the store's writer
thread, inside its transaction; :func:`prepare` runs where the record is written."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from agentflow.store._codec import decode_json, encode, text_hash
from agentflow.store._records import (
    AgentInfo,
    PolicyState,
    Record,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    ToolFinished,
    TurnFinished,
    describe_record,
)

__all__ = [
    "FINISHED_SQL",
    "MOVE_START_SQL",
    "TOOL",
    "TURN",
    "Row",
    "describe",
    "duplicate",
    "prepare",
    "records_fault",
    "rollback",
    "write_each",
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

#: An attempt's end moves its moment (``wall_ns``, ``clock_ns``) to the fleet's start
#: along the same wall-to-fleet-clock line (``RunEnded.start_ns``; unchanged when it is
#: ``None``). Every ``SET`` reads the row as it was. Parameters: the start, twice.
MOVE_START_SQL = (
    "wall_ns = wall_ns + COALESCE(CAST(? AS BIGINT) - clock_ns, 0),"
    " clock_ns = COALESCE(CAST(? AS BIGINT), clock_ns)"
)

_TURN_SQL = "INSERT INTO turns VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_TOOL_SQL = "INSERT INTO tool_calls VALUES (?,?,?,?,?,?,?,?,?,?)"


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the caller's transaction after a failure — if there still is one: on a
    full disk or an I/O error SQLite has rolled it back itself, and a ``ROLLBACK`` then
    raised "cannot rollback - no transaction is active", which the store reported in
    place of the real cause. Should the rollback fail too, the caller's error is still
    the one raised."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def records_fault(exc: Exception) -> bool:
    """Whether ``exc`` is a record's own fault — it cannot be encoded (a value whose
    ``repr`` raises, a lone surrogate) or bound (a type SQLite does not take, an integer
    past 64 bits) — rather than SQLite's (locked, full, I/O, a damaged file), which fails
    any record."""
    return not isinstance(exc, sqlite3.Error) or isinstance(
        exc,
        # (an IntegrityError that reaches here is not a duplicate, which _insert files
        # as a conflict: a NOT NULL column the record leaves empty — a NaN binds as NULL)
        sqlite3.ProgrammingError | sqlite3.InterfaceError | sqlite3.DataError
        | sqlite3.IntegrityError,
    )  # fmt: skip


#: The constraint errors of a key already recorded (:func:`_insert`'s conflicts).
_DUPLICATE = frozenset({"SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"})


def duplicate(exc: sqlite3.IntegrityError) -> bool:
    """Whether ``exc`` says the row's key is recorded already — not that a value breaks
    another constraint (NOT NULL: a NaN binds as NULL), which is the record's own fault
    (it used to be filed as a duplicate conflict, and the record dropped without a
    word)."""
    return getattr(exc, "sqlite_errorname", None) in _DUPLICATE


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
            "UPDATE run_attempts SET ended_wall_ns=?, status=?, retries=?, wall_s=?,"
            f" {MOVE_START_SQL} WHERE run_id=? AND attempt=?",
            (r.wall_ns, r.status, r.retries, r.wall_s, r.start_ns, r.start_ns, r.run_id, r.attempt),
        )
        conn.execute(
            f"UPDATE runs SET status={FINISHED_SQL} WHERE run_id=?", (r.status, r.run_id, r.run_id)
        )


def _insert(
    conn: sqlite3.Connection, kind: str, key: str, run_id: str, sql: str, row: tuple[Any, ...]
) -> bool:
    try:
        conn.execute(sql, row)
    except sqlite3.IntegrityError as exc:
        if not duplicate(exc):
            raise
        conn.execute("INSERT INTO conflicts VALUES (?,?,?,?)", (run_id, kind, key, time.time_ns()))
        return False
    return True


#: A turn's or tool result's row, made as the record was written (:func:`prepare`):
#: (:data:`TURN` or :data:`TOOL`, the row's values).
Row = tuple[int, tuple[Any, ...]]
TURN, TOOL = 0, 1


def describe(item: Record | Row) -> str:
    """What a log line or an error calls ``item`` (a record, or a row :func:`prepare`
    made): its kind and key."""
    if isinstance(item, tuple):
        kind, row = item
        return f"{'turn' if kind == TURN else 'tool call'} {row[1]}/{row[2]} of run {row[0]}"
    return describe_record(item)


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
            agent = _as_json_agent(r.agent)
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


#: id(AgentInfo) -> (it, :func:`_as_json_agent` of it), for the last agents written.
_agents: dict[int, tuple[AgentInfo, AgentInfo]] = {}
#: An agent config's JSON -> what it decodes to, shared by the agents whose config it is
#: (a fleet's agents mostly differ by name only; the config, with its tool schemas, is
#: a few KB to decode: ~1 ms of the loop at the demo's start for its 64 agents).
_configs: dict[str, Any] = {}


def _as_json_agent(agent: AgentInfo) -> AgentInfo:
    """``agent`` with its config as its JSON column reads back: one object per agent
    (the ``Recorder`` makes one per agent), so the journal writes each agent's frame once
    per segment, not once per session."""
    hit = _agents.get(id(agent))
    if hit is not None and hit[0] is agent:
        return hit[1]
    text = encode(agent.config)
    config = _configs.get(text)
    if config is None:
        config = _configs[text] = decode_json(text)
    done = dataclasses.replace(agent, config=config)
    if len(_agents) >= 256:  # (they hold system prompts: a few, not every agent ever)
        _agents.clear()
        _configs.clear()
    _agents[id(agent)] = (agent, done)
    return done


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


def write_each(
    conn: sqlite3.Connection,
    items: list[Record | Row],
    write: Callable[[sqlite3.Connection, list[Record | Row]], None] | None = None,
) -> list[tuple[Record | Row, Exception]]:
    """Write ``items`` inside the caller's transaction (with ``write``, by default
    :func:`write_records`); should one fail on its own (:func:`records_fault`), again one
    by one, each in a savepoint, leaving out — and returning, with its error — those that
    fail. SQLite's own errors fail it."""
    write = write or write_records
    conn.execute("SAVEPOINT each")
    try:
        write(conn, items)
    except Exception as exc:
        if not records_fault(exc):
            raise
        conn.execute("ROLLBACK TO each")
    else:
        conn.execute("RELEASE each")
        return []
    lost: list[tuple[Record | Row, Exception]] = []
    for r in items:
        conn.execute("SAVEPOINT one")
        try:
            write(conn, [r])
        except Exception as exc:
            if not records_fault(exc):
                raise
            conn.execute("ROLLBACK TO one")
            lost.append((r, exc))
        conn.execute("RELEASE one")
    conn.execute("RELEASE each")
    return lost
