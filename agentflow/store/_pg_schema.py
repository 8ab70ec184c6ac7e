"""The PostgreSQL store's schema: the SQLite store's tables (``docs/store.md``, version
:data:`~agentflow.store.SCHEMA_VERSION`) with PostgreSQL's column types, in a schema
(namespace) of their own, ``agentflow`` by default.

JSON columns stay ``TEXT``, as in SQLite: the stored bytes are exactly what was
written (msgspec decodes them directly; ``jsonb`` would reorder keys and refuse
``\\u0000``); query them with ``column::jsonb``. Times are ``BIGINT`` nanoseconds, flags
``BOOLEAN``, durations ``DOUBLE PRECISION``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agentflow._errors import StoreError
from agentflow._logging import get_logger
from agentflow.store._schema import OLDER_VERSIONS, SCHEMA_VERSION, check_version

if TYPE_CHECKING:
    import psycopg

__all__ = ["PG_RELATIONS", "PG_SCHEMA", "check_pg_schema", "ended_attempts"]

_log = get_logger("agentflow.store")

PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id          TEXT PRIMARY KEY,
    created_wall_ns BIGINT NOT NULL,
    status          TEXT NOT NULL,
    sessions        INTEGER NOT NULL,
    config          TEXT
);
CREATE TABLE IF NOT EXISTS run_attempts (
    run_id        TEXT NOT NULL REFERENCES runs(run_id),
    attempt       INTEGER NOT NULL,
    wall_ns       BIGINT NOT NULL,
    clock_ns      BIGINT NOT NULL,
    ended_wall_ns BIGINT,
    status        TEXT,
    retries       INTEGER NOT NULL DEFAULT 0,
    wall_s        DOUBLE PRECISION,
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS texts (
    hash TEXT PRIMARY KEY,
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agents (
    run_id            TEXT NOT NULL REFERENCES runs(run_id),
    name              TEXT NOT NULL,
    fingerprint       TEXT NOT NULL,
    instructions_hash TEXT NOT NULL REFERENCES texts(hash),
    config            TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS sessions (
    run_id           TEXT NOT NULL REFERENCES runs(run_id),
    session_id       TEXT NOT NULL,
    position         INTEGER NOT NULL,
    agent            TEXT NOT NULL,
    fingerprint      TEXT NOT NULL,
    task             TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    status           TEXT NOT NULL,
    final_output     TEXT,
    error            TEXT,
    turns            INTEGER NOT NULL DEFAULT 0,
    budget           TEXT,
    sticky_replica   TEXT,
    lease_owner      TEXT,
    lease_expires_ns BIGINT,                -- the database server's clock
    ended_attempt    INTEGER,               -- the run's latest attempt when it ended
    PRIMARY KEY (run_id, session_id)
);
CREATE TABLE IF NOT EXISTS turns (
    run_id          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    turn            INTEGER NOT NULL,
    attempt         INTEGER NOT NULL,
    message         TEXT NOT NULL,
    rewrite         TEXT,
    ready_ns        BIGINT NOT NULL,
    prompt_tokens   INTEGER,
    cached_tokens   INTEGER,
    output_tokens   INTEGER NOT NULL,
    ttft_s          DOUBLE PRECISION,
    e2e_s           DOUBLE PRECISION NOT NULL,
    queue_wait_s    DOUBLE PRECISION NOT NULL,
    failed_attempts INTEGER NOT NULL,
    failures        TEXT,
    prompt          TEXT,
    replica         TEXT,
    trace           TEXT NOT NULL,
    PRIMARY KEY (run_id, session_id, turn)
);
CREATE TABLE IF NOT EXISTS tool_calls (
    run_id          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    call_id         TEXT NOT NULL,
    turn            INTEGER NOT NULL,
    name            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    output          TEXT NOT NULL,
    is_error        BOOLEAN NOT NULL,
    duration_s      DOUBLE PRECISION NOT NULL,
    truncated_chars INTEGER NOT NULL,
    PRIMARY KEY (run_id, session_id, call_id)
);
CREATE TABLE IF NOT EXISTS policy_state (
    run_id  TEXT NOT NULL,
    key     TEXT NOT NULL,                  -- e.g. calibrator:<agent>
    state   TEXT NOT NULL,                  -- JSON: the last state written
    wall_ns BIGINT NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS conflicts (
    run_id  TEXT NOT NULL,
    kind    TEXT NOT NULL,                  -- turn | tool_call | session | run | attempt
    key     TEXT NOT NULL,                  --   | agent | fenced <kind> (lease not held)
    wall_ns BIGINT NOT NULL                 -- the database server's clock
);
CREATE INDEX IF NOT EXISTS conflicts_run ON conflicts (run_id);
"""


#: What :data:`PG_SCHEMA` makes: its tables and its index.
PG_RELATIONS = tuple(re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", PG_SCHEMA))


def check_pg_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str, where: str) -> None:
    """Create the schema and its tables in a new database; refuse one of another
    version, or a schema that holds tables and no agentflow version (another
    application's: :func:`_refuse_foreign`). Workers opening one database at once take
    turns (an advisory lock), so two never race to create the same table.

    Where the schema, every table and index, and the version row exist already, nothing
    is created (no DDL is run): a role that may only read and write the tables an
    administrator made can open the store. (``CREATE … IF NOT EXISTS`` checks the
    privilege to create before it looks whether the object exists.) A store of an older
    version this agentflow reads (``OLDER_VERSIONS``) is marked ``SCHEMA_VERSION`` (an
    ``UPDATE`` of its version row), so that an agentflow of that version, which would
    misread what this one records, refuses it from then on."""
    from psycopg import sql

    version = _version(conn, schema)
    if version is None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentflow.store.schema'))")
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
            _refuse_foreign(conn, schema, where)
            conn.execute(PG_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', %s)",
                    (str(SCHEMA_VERSION),),
                )
            version = str(SCHEMA_VERSION) if row is None else str(row[0])
    check_version(version, where)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    if version in OLDER_VERSIONS:  # (an autocommit connection: committed at once)
        conn.execute(
            "UPDATE meta SET value = %s WHERE key = 'schema_version' AND value = ANY(%s)",
            (str(SCHEMA_VERSION), sorted(OLDER_VERSIONS)),
        )


_HAS_ENDED_ATTEMPT = (
    "SELECT 1 FROM information_schema.columns WHERE table_schema = %s"
    " AND table_name = 'sessions' AND column_name = 'ended_attempt'"
)


#: How long the ``ALTER TABLE`` adding ``ended_attempt`` waits for its lock: it waits
#: behind any open transaction that touched ``sessions`` (another worker's, a psql
#: session's), and every other statement on ``sessions`` queues behind it meanwhile.
ALTER_LOCK_TIMEOUT = "1s"


def ended_attempts(conn: psycopg.Connection[tuple[object, ...]], schema: str, where: str) -> bool:
    """Whether ``sessions.ended_attempt`` is there — added now to a store made before it
    (one ``ALTER TABLE``, workers taking turns, waiting at most :data:`ALTER_LOCK_TIMEOUT`
    for their turn and again for its lock). Without it — a role that may not alter the
    tables an administrator made, or a lock held longer by another transaction — the
    store opens as before (a warning logged) and tries again at its next connect: a
    resumed attempt meanwhile tells an end recorded elsewhere by its status and turns
    alone, and may run a session that another worker re-ran and that ended the same way
    again (``docs/store.md``, *Leases*). Run after :func:`check_pg_schema`."""
    import psycopg
    from psycopg import sql

    if conn.execute(_HAS_ENDED_ATTEMPT, (schema,)).fetchone() is not None:
        return True
    try:
        with conn.transaction():
            # Before the workers' turns too: each waited for the turn without a bound,
            # then up to the timeout for the ALTER's lock, one after another.
            conn.execute(f"SET LOCAL lock_timeout = '{ALTER_LOCK_TIMEOUT}'")
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentflow.store.schema'))")
            if conn.execute(_HAS_ENDED_ATTEMPT, (schema,)).fetchone() is None:
                conn.execute(
                    sql.SQL("ALTER TABLE {}.sessions ADD COLUMN ended_attempt INTEGER").format(
                        sql.Identifier(schema)
                    )
                )
    except psycopg.Error as exc:
        try:  # another worker's ALTER may have committed as this one's wait ran out
            if conn.execute(_HAS_ENDED_ATTEMPT, (schema,)).fetchone() is not None:
                return True
        except psycopg.Error:
            pass
        _log.warning(
            "store.column_not_added", store=where, column="sessions.ended_attempt", error=str(exc)
        )
        return False
    return True


def _refuse_foreign(conn: psycopg.Connection[tuple[object, ...]], schema: str, where: str) -> None:
    """Refuse a schema that holds tables and no agentflow schema version: another
    application's (``schema="public"``, say), whose ``meta`` got this store's version and
    beside whose tables this store's were made (it used to take it over, then fail on a
    foreign ``sessions`` table). This store's tables are made in one transaction with
    the version, so its own schema always has one. Reads only; run in the caller's
    transaction (the failed read of a foreign ``meta`` in a savepoint)."""
    import psycopg

    tables = sorted(
        str(name)
        for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
            (schema,),
        )
    )
    if not tables:
        return
    row = None
    if "meta" in tables:
        try:
            with conn.transaction():  # a savepoint: a foreign meta may lack these columns
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except psycopg.Error:
            row = None
    if row is None:
        more = ", ..." if len(tables) > 5 else ""
        raise StoreError(
            f"{where}: not an agentflow store (schema {schema} holds {', '.join(tables[:5])}"
            f"{more} and no agentflow schema version); give PostgresStore a schema of its own"
        )


def _version(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> str | None:
    """The store's schema version, if the schema holds every table and index and the
    version row; else ``None`` (something is to be created)."""
    from psycopg import sql

    row = conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY(%s)",
        (schema, list(PG_RELATIONS)),
    ).fetchone()
    if row is None or row[0] != len(PG_RELATIONS):
        return None
    query = sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'")
    found = conn.execute(query.format(sql.Identifier(schema))).fetchone()
    return None if found is None else str(found[0])
