"""The SQLite store's schema (version :data:`SCHEMA_VERSION`), documented in
``docs/store.md``. JSON columns hold compact JSON text; times are integer nanoseconds.
"""

from __future__ import annotations

import sqlite3

from agentflow._errors import StoreError
from agentflow.store._sqlite_write import rollback

__all__ = [
    "OLDER_VERSIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TABLES",
    "check_schema",
    "check_version",
    "refuse_other_version",
]

#: Bumped whenever a table or column changes meaning; a store of another version is
#: refused with a :class:`StoreError` rather than misread. Version 2: ``turns.rewrite``
#: holds what the context policy changed (messages and ``[start, stop]`` runs of the
#: history before it), no longer the whole history (version 1).
SCHEMA_VERSION = 2

#: Earlier versions this agentflow reads as they are (a version 1 store's rewrites are
#: whole histories: deltas with no runs). Opening one marks it :data:`SCHEMA_VERSION`
#: before anything is written, so that an agentflow of that version, which would
#: misread what this one records, then refuses it.
OLDER_VERSIONS = frozenset({"1"})

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id          TEXT PRIMARY KEY,
    created_wall_ns INTEGER NOT NULL,
    status          TEXT NOT NULL,          -- running | finished | partial
    sessions        INTEGER NOT NULL,
    config          TEXT                    -- JSON: what the caller recorded (no secrets)
);
CREATE TABLE IF NOT EXISTS run_attempts (
    run_id        TEXT NOT NULL REFERENCES runs(run_id),
    attempt       INTEGER NOT NULL,         -- 0: the run; 1, 2, ...: resumptions
    wall_ns       INTEGER NOT NULL,         -- time.time_ns() when it started
    clock_ns      INTEGER NOT NULL,         -- the fleet clock at that moment
    ended_wall_ns INTEGER,                  -- NULL: killed, or still running
    status        TEXT,
    retries       INTEGER NOT NULL DEFAULT 0,
    wall_s        REAL,                     -- its run time on the fleet's clock (clean end)
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS texts (
    hash TEXT PRIMARY KEY,                  -- BLAKE2b-128 of text: system prompts, once
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agents (
    run_id            TEXT NOT NULL REFERENCES runs(run_id),
    name              TEXT NOT NULL,
    fingerprint       TEXT NOT NULL,
    instructions_hash TEXT NOT NULL REFERENCES texts(hash),
    config            TEXT NOT NULL,        -- JSON: model, tool schemas, params, limits
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS sessions (
    run_id           TEXT NOT NULL REFERENCES runs(run_id),
    session_id       TEXT NOT NULL,
    position         INTEGER NOT NULL,      -- its place in the run's session list
    agent            TEXT NOT NULL,
    fingerprint      TEXT NOT NULL,         -- the agent's config fingerprint
    task             TEXT NOT NULL,         -- JSON: initial messages after the system prompt
    metadata         TEXT NOT NULL,         -- JSON
    status           TEXT NOT NULL,         -- pending | completed | max_turns | error | cancelled
    final_output     TEXT,
    error            TEXT,
    turns            INTEGER NOT NULL DEFAULT 0,
    budget           TEXT,                  -- JSON: budget state, when a policy keeps one
    sticky_replica   TEXT,                  -- the endpoint of its last turn
    lease_owner      TEXT,                  -- host:pid:token, NULL when free
    lease_expires_ns INTEGER,               -- wall clock
    PRIMARY KEY (run_id, session_id)
);
CREATE TABLE IF NOT EXISTS turns (
    run_id          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    turn            INTEGER NOT NULL,
    attempt         INTEGER NOT NULL,       -- which run attempt recorded it
    message         TEXT NOT NULL,          -- JSON: the assistant message the turn appended
    rewrite         TEXT,                   -- JSON: whole history, if the policy rewrote it
    ready_ns        INTEGER NOT NULL,
    prompt_tokens   INTEGER,
    cached_tokens   INTEGER,
    output_tokens   INTEGER NOT NULL,
    ttft_s          REAL,
    e2e_s           REAL NOT NULL,
    queue_wait_s    REAL NOT NULL,
    failed_attempts INTEGER NOT NULL,       -- attempts retried before this one succeeded
    failures        TEXT,                   -- JSON: one line per failed attempt
    prompt          TEXT,                   -- JSON: the client's PromptInfo
    replica         TEXT,                   -- the endpoint that served it
    trace           TEXT NOT NULL,          -- JSON: the TurnTrace (chunk times, usage)
    PRIMARY KEY (run_id, session_id, turn)
);
CREATE TABLE IF NOT EXISTS tool_calls (
    run_id          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    call_id         TEXT NOT NULL,
    turn            INTEGER NOT NULL,
    name            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    output          TEXT NOT NULL,          -- what was sent to the model (after any cap)
    is_error        INTEGER NOT NULL,
    duration_s      REAL NOT NULL,
    truncated_chars INTEGER NOT NULL,
    PRIMARY KEY (run_id, session_id, call_id)
);
CREATE TABLE IF NOT EXISTS policy_state (
    run_id  TEXT NOT NULL,
    key     TEXT NOT NULL,                  -- e.g. calibrator:<agent>
    state   TEXT NOT NULL,                  -- JSON: the last state written
    wall_ns INTEGER NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS conflicts (
    run_id  TEXT NOT NULL,
    kind    TEXT NOT NULL,                  -- turn | tool_call | session | run
    key     TEXT NOT NULL,
    wall_ns INTEGER NOT NULL
);
"""


#: The tables of :data:`SCHEMA`: a database holding nothing else (and no schema version
#: yet) is a store whose making was cut short, not another application's.
TABLES = frozenset(
    line.split()[5] for line in SCHEMA.splitlines() if line.startswith("CREATE TABLE")
)


def _statements(script: str) -> list[str]:
    out, lines = [], list[str]()
    for line in script.splitlines(keepends=True):
        lines.append(line)
        if sqlite3.complete_statement("".join(lines)):
            out.append("".join(lines))
            lines.clear()
    return out


#: :data:`SCHEMA` one statement at a time (``executescript`` would commit the
#: transaction they are made in).
_STATEMENTS = _statements(SCHEMA)


def refuse_other_version(conn: sqlite3.Connection, where: str) -> bool:
    """Refuse a database this agentflow must not open, before anything is written to it:
    a store of a schema version it does not read (a store of a newer agentflow must not
    get this version's tables, nor be put in WAL mode, by a command that then refuses
    it; :data:`OLDER_VERSIONS` are read, and marked by :func:`check_schema`), and a
    database that is not an agentflow store at all (another application's: it must not
    get agentflow's tables). Reads only.

    Returns:
        whether the database is new: empty, or holding only agentflow's tables and no
        schema version yet (its making was cut short) — :func:`check_schema` makes it.

    Raises:
        StoreError: another schema version, or not an agentflow store.
    """
    names = {
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        )
    }
    if not names:
        return True
    if "meta" in names:
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError:  # another application's table named meta
            row = None
        if row is not None:
            check_version(row[0], where)
            return False
    if names <= TABLES:
        return True
    raise StoreError(
        f"{where}: not an agentflow store (it holds {', '.join(sorted(names)[:5])}"
        f"{', ...' if len(names) > 5 else ''} and no agentflow schema version)"
    )


def check_schema(conn: sqlite3.Connection, where: str, *, new: bool) -> None:
    """Make the tables of a new store (``new``, as :func:`refuse_other_version` found it,
    which the opener runs first, before writing) in one transaction with its schema
    version, so that another opener sees either no store or a whole one; add any table
    an existing store of this version lacks. A store of an older version this agentflow
    reads (:data:`OLDER_VERSIONS`) is marked :data:`SCHEMA_VERSION`, before anything is
    recorded in it: what this process records, an agentflow of that version would
    misread."""
    if not new:
        conn.executescript(SCHEMA)  # (IF NOT EXISTS: nothing, for a whole store)
        _mark_older(conn)
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _STATEMENTS:
            conn.execute(statement)
        # (Another opener may have made it meanwhile: the first wins.)
        conn.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    check_version(value, where)
    if value in OLDER_VERSIONS:  # an older agentflow made it first
        _mark_older(conn)


def _mark_older(conn: sqlite3.Connection) -> None:
    """Mark a store of one of :data:`OLDER_VERSIONS` as :data:`SCHEMA_VERSION` (one
    autocommitted statement; a store of this version is not written to)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is not None and row[0] in OLDER_VERSIONS:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version' AND value = ?",
            (str(SCHEMA_VERSION), row[0]),
        )


def check_version(value: str, where: str) -> None:
    """Refuse a store whose ``meta.schema_version`` is ``value`` unless this agentflow
    reads it: :data:`SCHEMA_VERSION`, or one of :data:`OLDER_VERSIONS` (which the opener
    then marks :data:`SCHEMA_VERSION`). Shared by the SQLite and PostgreSQL stores.

    Raises:
        StoreError: another version (``where`` names the store).
    """
    if value != str(SCHEMA_VERSION) and value not in OLDER_VERSIONS:
        raise StoreError(
            f"{where}: store schema version {value}, this agentflow reads version "
            f"{SCHEMA_VERSION} (or {' or '.join(sorted(OLDER_VERSIONS))}, marked "
            f"{SCHEMA_VERSION} as it is opened)"
        )
