"""The SQLite store's schema (version :data:`SCHEMA_VERSION`), documented in
``docs/store.md``. JSON columns hold compact JSON text; times are integer nanoseconds.
"""

from __future__ import annotations

import sqlite3

from agentflow._errors import StoreError

__all__ = ["SCHEMA", "SCHEMA_VERSION", "check_schema", "refuse_other_version"]

#: Bumped whenever a table or column changes meaning; a store of another version is
#: refused with a :class:`StoreError` rather than misread.
SCHEMA_VERSION = 1

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


def refuse_other_version(conn: sqlite3.Connection, where: str) -> None:
    """Refuse a store of another schema version before anything is written to it (a
    store of a newer agentflow must not get this version's tables, nor be put in WAL
    mode, by a command that then refuses it). Reads only: a new store passes."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta is None:
        return
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is not None and row[0] != str(SCHEMA_VERSION):
        raise StoreError(
            f"{where}: store schema version {row[0]}, this agentflow reads version {SCHEMA_VERSION}"
        )


def check_schema(conn: sqlite3.Connection, where: str) -> None:
    """Create the tables in a new store; refuse a store of another schema version (see
    :func:`refuse_other_version`, which the opener runs first, before writing)."""
    refuse_other_version(conn, where)
    conn.executescript(SCHEMA)
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:  # a new store (another opener may be making it too: the first wins)
        conn.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )
        conn.commit()
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row[0] != str(SCHEMA_VERSION):
        raise StoreError(
            f"{where}: store schema version {row[0]}, this agentflow reads version {SCHEMA_VERSION}"
        )
