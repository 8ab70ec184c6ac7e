"""The SQL of :class:`~agentflow.store.PostgresStore`: one statement per record (so a
batch goes to the server in one pipeline, :func:`commit`), the leases, the attempt
counter, the commit marker and which errors are a record's own. Every function runs on
the store's writer thread.

Duplicates are detected without aborting the batch: each insert is ``ON CONFLICT DO
NOTHING RETURNING 1`` in a CTE, and the same statement records a conflict row when the
insert did nothing. A record of a session whose lease this store took (``owner``) is
*fenced*: it is written only while the session's row still names that owner, a row it
locks (``FOR SHARE``) until the batch commits, so a worker that lost a lease (it
expired, another took it) can no longer write into that session; the refused record
is kept as a ``fenced …`` conflict. Lease expiry is on the database server's clock
(:data:`NOW_NS`), so workers on machines with skewed clocks agree on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentflow._errors import RunNotFound
from agentflow._logging import get_logger
from agentflow.store._codec import encode, text_hash
from agentflow.store._records import (
    PolicyState,
    Record,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    ToolFinished,
    TurnFinished,
)
from agentflow.store._sqlite_write import MOVE_START_SQL

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[tuple[Any, ...]]

__all__ = [
    "FREE",
    "NOW_NS",
    "Qmark",
    "claim",
    "commit",
    "create_run",
    "drop_marker",
    "marker",
    "records_fault",
    "release",
    "renew",
    "set_marker",
    "start_attempt",
    "write_record",
]

_log = get_logger("agentflow.store")

#: The database server's clock, in integer nanoseconds since the epoch.
NOW_NS = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint"

#: The ``owner`` of a session's record that this store holds no lease of: it is written
#: only while no other holds a live one (a store that never claimed the session must not
#: write into one another worker runs).
FREE = ""

_LEASE = (
    "lease AS (SELECT lease_expires_ns FROM sessions WHERE run_id = %(run)s"
    " AND session_id = %(sid)s AND (lease_owner = %(owner)s OR %(owner)s = '') FOR SHARE)"
)
_HELD = (
    "(%(owner)s::text IS NULL OR CASE WHEN %(owner)s = '' THEN NOT EXISTS (SELECT 1 FROM"
    f" lease WHERE lease_expires_ns >= {NOW_NS}) ELSE EXISTS (SELECT 1 FROM lease) END)"
)
_CONFLICT = (
    "INSERT INTO conflicts SELECT %(run)s,"
    f" CASE WHEN {_HELD} THEN %(kind)s ELSE 'fenced ' || %(kind)s END, %(key)s, {NOW_NS}"
    " WHERE NOT EXISTS (SELECT 1 FROM ins)"
)


class Qmark:
    """A psycopg connection seen through ``execute(sql, params)`` with ``?``
    placeholders, so the SQLite store's readers run on it unchanged."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def execute(self, query: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        """Run ``query`` (``?`` placeholders) with ``params``."""
        return self.conn.execute(query.replace("?", "%s"), params)


def _t(text: str | None) -> str | None:
    """PostgreSQL's ``TEXT`` cannot hold NUL: it is stored as U+FFFD."""
    return text.replace("\x00", "\ufffd") if text and "\x00" in text else text


class _Texts:
    """A cursor whose every ``str`` parameter goes through :func:`_t`: a NUL in any text
    of a record (a tool call's id or name, an endpoint, a session id…) is stored as
    U+FFFD, as SQLite stores the record, instead of the server refusing it."""

    __slots__ = ("cur",)

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self.cur = cur

    def execute(self, query: str, params: dict[str, Any] | tuple[Any, ...]) -> None:
        if isinstance(params, dict):
            params = {k: _t(v) if type(v) is str else v for k, v in params.items()}
        else:
            params = tuple(_t(v) if type(v) is str else v for v in params)
        self.cur.execute(query, params)


#: What a session's end sets with ``stamp_ends``: the run's latest attempt by then. An
#: attempt re-runs a session only if its end was stamped before that attempt was
#: numbered (``start_attempt`` numbers them in order), so the end it writes has a later
#: stamp than the one it replaces: another attempt that started in between sees the
#: stamp change, whatever the status and turns (``SessionGate._entry``).
_ENDED_ATTEMPT = ", ended_attempt = (SELECT max(attempt) FROM run_attempts WHERE run_id = %(run)s)"


def write_record(
    raw: psycopg.Cursor[Any], r: Record, owner: str | None, *, stamp_ends: bool = False
) -> None:
    """Queue the statement(s) of one record (inside the caller's transaction);
    ``owner``: the lease holder the record's session must still have, :data:`FREE`
    (nobody may hold a live lease of it), or ``None`` (not checked); ``stamp_ends``: a
    session's end sets ``sessions.ended_attempt`` (the store has the column)."""
    cur = _Texts(raw)
    if isinstance(r, TurnFinished):
        m, t = r.metrics, r.trace
        row = dict(
            run=r.run_id, sid=r.session_id, owner=owner, kind="turn",
            key=f"{r.session_id}/{r.turn}", turn=r.turn, attempt=r.attempt,
            message=encode(r.message),
            rewrite=None if r.rewrite is None else encode(r.rewrite), ready=r.ready_ns,
            pt=m.prompt_tokens, ct=m.cached_tokens, ot=m.output_tokens, ttft=m.ttft_s,
            e2e=m.e2e_s, qw=m.queue_wait_s, failed=r.failed_attempts,
            failures=encode(r.failures) if r.failures else None,
            prompt=None if r.prompt is None else encode(r.prompt), replica=t.endpoint,
            trace=encode(t), next=r.turn + 1,
        )  # fmt: skip
        cur.execute(
            f"WITH {_LEASE}, ins AS (INSERT INTO turns SELECT %(run)s, %(sid)s, %(turn)s,"
            " %(attempt)s, %(message)s, %(rewrite)s, %(ready)s, %(pt)s, %(ct)s, %(ot)s,"
            " %(ttft)s, %(e2e)s, %(qw)s, %(failed)s, %(failures)s, %(prompt)s, %(replica)s,"
            f" %(trace)s WHERE {_HELD} ON CONFLICT DO NOTHING RETURNING 1),"
            " upd AS (UPDATE sessions SET turns = %(next)s, sticky_replica = %(replica)s"
            " WHERE run_id = %(run)s AND session_id = %(sid)s AND EXISTS (SELECT 1 FROM ins))"
            f" {_CONFLICT}",
            row,
        )
    elif isinstance(r, ToolFinished):
        c = r.call
        cur.execute(
            f"WITH {_LEASE}, ins AS (INSERT INTO tool_calls SELECT %(run)s, %(sid)s, %(cid)s,"
            " %(turn)s, %(name)s, %(args)s, %(out)s, %(err)s, %(dur)s, %(cut)s"
            f" WHERE {_HELD} ON CONFLICT DO NOTHING RETURNING 1) {_CONFLICT}",
            dict(
                run=r.run_id, sid=r.session_id, owner=owner, kind="tool_call",
                key=f"{r.session_id}/{c.id}", cid=c.id, turn=r.turn, name=c.name,
                args=c.arguments, out=r.output, err=r.is_error, dur=r.duration_s,
                cut=r.truncated_chars,
            ),
        )  # fmt: skip
    elif isinstance(r, SessionStarted):
        _session(cur, r)
    elif isinstance(r, SessionEnded):
        cur.execute(
            f"WITH {_LEASE}, ins AS (UPDATE sessions SET status = %(st)s, final_output = %(out)s,"
            f" error = %(err)s, turns = %(n)s{_ENDED_ATTEMPT if stamp_ends else ''}"
            " WHERE run_id = %(run)s AND session_id = %(sid)s"
            f" AND {_HELD} RETURNING 1) {_CONFLICT} AND NOT {_HELD}",
            dict(
                run=r.run_id, sid=r.session_id, owner=owner, kind="session_end",
                key=r.session_id, st=r.status, out=r.final_output, err=r.error,
                n=r.turns,
            ),
        )  # fmt: skip
    elif isinstance(r, PolicyState):
        cur.execute(
            "INSERT INTO policy_state VALUES (%s, %s, %s, " + NOW_NS + ")"
            " ON CONFLICT (run_id, key) DO UPDATE SET state = EXCLUDED.state,"
            " wall_ns = EXCLUDED.wall_ns",
            (r.run_id, r.key, encode(r.state)),
        )
    elif isinstance(r, RunStarted):
        _run_started(cur, r)
    elif isinstance(r, RunEnded):
        cur.execute(
            "UPDATE run_attempts SET ended_wall_ns = %s, status = %s, retries = %s, wall_s = %s,"
            f" {MOVE_START_SQL.replace('?', '%s')} WHERE run_id = %s AND attempt = %s",
            (r.wall_ns, r.status, r.retries, r.wall_s, r.start_ns, r.start_ns, r.run_id, r.attempt),
        )
        # One worker at a time: the next statement's snapshot sees the other's ends.
        cur.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (r.run_id,))
        cur.execute(_RUN_STATUS, (r.run_id, r.run_id))


#: A run's status as an attempt ends, from the database alone: ``finished`` once every
#: session it was created with is recorded and none is left unfinished, whichever worker
#: ended it; else ``partial``. (The attempt's own view — the shared ``FINISHED_SQL`` —
#: also counted: a worker that resumed the run while its creator was still writing its
#: sessions found none to run, and marked it ``finished``.) Parameters: the run id, twice.
_RUN_STATUS = (
    "UPDATE runs r SET status = CASE WHEN NOT EXISTS (SELECT 1 FROM sessions s"
    " WHERE s.run_id = r.run_id AND s.status NOT IN ('completed', 'max_turns'))"
    " AND (SELECT count(*) FROM sessions s WHERE s.run_id = %s) >= r.sessions"
    " THEN 'finished' ELSE 'partial' END WHERE r.run_id = %s"
)


def _insert(kind: str, insert: str) -> str:
    return (
        f"WITH ins AS ({insert} ON CONFLICT DO NOTHING RETURNING 1) INSERT INTO conflicts"
        f" SELECT %(run)s, '{kind}', %(key)s, {NOW_NS} WHERE NOT EXISTS (SELECT 1 FROM ins)"
    )


def _session(cur: _Texts, r: SessionStarted) -> None:
    a = r.agent
    h = text_hash(a.instructions)
    cur.execute("INSERT INTO texts VALUES (%s, %s) ON CONFLICT DO NOTHING", (h, a.instructions))
    cur.execute(
        "WITH ins AS (INSERT INTO agents VALUES (%(run)s, %(name)s, %(fp)s, %(h)s, %(cfg)s)"
        " ON CONFLICT DO NOTHING RETURNING 1) INSERT INTO conflicts SELECT %(run)s, 'agent',"
        f" %(key)s, {NOW_NS} WHERE NOT EXISTS (SELECT 1 FROM ins) AND EXISTS (SELECT 1 FROM"
        " agents WHERE run_id = %(run)s AND name = %(name)s AND fingerprint <> %(fp)s)",
        dict(run=r.run_id, name=a.name, fp=a.fingerprint, h=h, cfg=encode(a.config),
             key=f"agent {a.name}: two configurations in one run"),
    )  # fmt: skip
    insert = (
        "INSERT INTO sessions (run_id, session_id, position, agent, fingerprint, task, metadata,"
        " status) VALUES (%(run)s, %(sid)s, %(pos)s, %(agent)s, %(fp)s, %(task)s, %(meta)s,"
        " 'pending')"
    )
    cur.execute(
        _insert("session", insert),
        dict(run=r.run_id, key=r.session_id, sid=r.session_id, pos=r.position, agent=a.name,
             fp=a.fingerprint, task=encode(r.task), meta=encode(r.metadata)),
    )  # fmt: skip


def _run_started(cur: _Texts, r: RunStarted) -> None:
    if r.attempt == 0:
        insert = "INSERT INTO runs VALUES (%(run)s, %(wall)s, 'running', %(n)s, %(cfg)s)"
        cur.execute(
            _insert("run", insert),
            dict(run=r.run_id, key=r.run_id, wall=r.wall_ns, n=r.sessions,
                 cfg=None if r.config is None else encode(r.config)),
        )  # fmt: skip
    else:
        cur.execute("UPDATE runs SET status = 'running' WHERE run_id = %s", (r.run_id,))
    insert = (
        "INSERT INTO run_attempts (run_id, attempt, wall_ns, clock_ns)"
        " VALUES (%(run)s, %(attempt)s, %(wall)s, %(clock)s)"
    )
    cur.execute(
        _insert("attempt", insert),
        dict(run=r.run_id, key=f"{r.run_id}#{r.attempt}", attempt=r.attempt, wall=r.wall_ns,
             clock=r.clock_ns),
    )  # fmt: skip


def create_run(conn: Conn, r: RunStarted) -> bool:
    """Record a new run's start (``r``, attempt 0): its row and its first attempt's, in
    one transaction; ``False``, and nothing written, if the run id is already taken — the
    insert itself says so, so two workers starting one run id at once never both get it."""
    with conn.transaction():
        raw = conn.cursor()
        _Texts(raw).execute(
            "INSERT INTO runs VALUES (%s, %s, 'running', %s, %s) ON CONFLICT DO NOTHING"
            " RETURNING 1",
            (r.run_id, r.wall_ns, r.sessions, None if r.config is None else encode(r.config)),
        )
        if raw.fetchone() is None:
            return False
        _Texts(raw).execute(
            "INSERT INTO run_attempts (run_id, attempt, wall_ns, clock_ns) VALUES (%s, 0, %s, %s)",
            (r.run_id, r.wall_ns, r.clock_ns),
        )
    return True


def start_attempt(conn: Conn, run_id: str, wall_ns: int, clock_ns: int, where: str) -> int:
    """Record the next attempt at ``run_id`` and return its number (the run's row is
    locked meanwhile, so two workers never get the same number)."""
    with conn.transaction():
        lock = "SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE"
        if conn.execute(lock, (run_id,)).fetchone() is None:
            raise RunNotFound(run_id, where)
        row = conn.execute(
            "INSERT INTO run_attempts (run_id, attempt, wall_ns, clock_ns)"
            " SELECT %s, COALESCE(MAX(attempt), -1) + 1, %s, %s FROM run_attempts"
            " WHERE run_id = %s RETURNING attempt",
            (run_id, wall_ns, clock_ns, run_id),
        ).fetchone()
        conn.execute("UPDATE runs SET status = 'running' WHERE run_id = %s", (run_id,))
    assert row is not None
    return int(row[0])


def claim(conn: Conn, run_id: str, ids: list[str], owner: str, ttl_s: float) -> list[str]:
    """Take the free leases among ``ids`` in one statement: rows another claim has
    locked are skipped (``FOR UPDATE SKIP LOCKED``), so two workers never both get one."""
    rows = conn.execute(
        "WITH free AS (SELECT session_id FROM sessions WHERE run_id = %(run)s"
        " AND session_id = ANY(%(ids)s) AND (lease_owner IS NULL OR lease_owner = %(me)s"
        f" OR lease_expires_ns < {NOW_NS}) FOR UPDATE SKIP LOCKED)"
        f" UPDATE sessions s SET lease_owner = %(me)s, lease_expires_ns = {NOW_NS} + %(ttl)s"
        " FROM free WHERE s.run_id = %(run)s AND s.session_id = free.session_id"
        " RETURNING s.session_id",
        dict(run=run_id, ids=ids, me=owner, ttl=int(ttl_s * 1e9)),
    ).fetchall()
    return [str(r[0]) for r in rows]


def renew(conn: Conn, run_id: str, owner: str, ttl_s: float) -> list[str]:
    """Extend ``owner``'s leases; returns the ids it holds."""
    rows = conn.execute(
        f"UPDATE sessions SET lease_expires_ns = {NOW_NS} + %s"
        " WHERE run_id = %s AND lease_owner = %s RETURNING session_id",
        (int(ttl_s * 1e9), run_id, owner),
    ).fetchall()
    return [str(r[0]) for r in rows]


def release(conn: Conn, run_id: str, owner: str, ids: list[str] | None) -> list[str]:
    """Free ``owner``'s leases (those of ``ids`` only, if given); returns the ids freed."""
    rows = conn.execute(
        "UPDATE sessions SET lease_owner = NULL, lease_expires_ns = NULL"
        " WHERE run_id = %s AND lease_owner = %s"
        " AND (%s::text[] IS NULL OR session_id = ANY(%s::text[])) RETURNING session_id",
        (run_id, owner, ids, ids),
    ).fetchall()
    return [str(r[0]) for r in rows]


def records_fault(exc: Exception) -> bool:
    """Whether ``exc`` is a record's own fault — it cannot be encoded here (a lone
    surrogate), the server refuses its data (``DataError``, ``IntegrityError``) or finds
    it past one of its limits (SQLSTATE class 54, ``ProgramLimitExceeded``: a key longer
    than an index row can hold, ~2,700 bytes — a model's tool-call id, say) — rather
    than the connection's or the server's, which fails any record. (psycopg files class
    54 under ``OperationalError``, with the server's own faults: taken for one, such a
    record was held and tried again at every commit, and nothing after it was ever
    committed.)"""
    import psycopg
    from psycopg.errors import ProgramLimitExceeded

    return not isinstance(exc, psycopg.Error) or isinstance(
        exc, psycopg.DataError | psycopg.IntegrityError | ProgramLimitExceeded
    )


# A store's commit marker: its own row in ``meta`` (``writer:<random>``), set to each try
# at a commit's number inside that try's transaction, so that after a connection lost at
# COMMIT a new connection can tell whether the server committed it.


def set_marker(cur: Any, key: str, seq: int) -> None:
    """Set the marker ``key`` to ``seq`` (inside the caller's transaction)."""
    cur.execute(
        "INSERT INTO meta (key, value) VALUES (%s, %s)"
        " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (key, str(seq)),
    )


def marker(conn: Conn, key: str) -> int:
    """The number the marker ``key`` holds (0: none was committed)."""
    row = conn.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
    return int(row[0]) if row is not None else 0


def drop_marker(conn: Conn, key: str) -> None:
    """Remove the marker ``key`` (its store is closing)."""
    conn.execute("DELETE FROM meta WHERE key = %s", (key,))


def commit(
    conn: Conn,
    records: Sequence[Record],
    owner: Callable[[Record], str | None],
    marker: tuple[str, int],
    lost: list[tuple[Record, Exception]],
    where: str,
    *,
    stamp_ends: bool = False,
) -> None:
    """Commit ``records`` (each fenced by its ``owner(r)``; ``stamp_ends``: as
    :func:`write_record`) and set the commit marker
    (key, try number) in one transaction, as one pipeline; should one of them fail on
    its own (it cannot be encoded or bound: a lone surrogate in a text, say), again one
    by one, each in a savepoint, leaving out those that fail — added to ``lost`` with
    their errors, before the commit. The connection's errors, and the server's own,
    fail it."""
    try:
        with conn.pipeline(), conn.transaction():
            cur = conn.cursor()
            for r in records:
                write_record(cur, r, owner(r), stamp_ends=stamp_ends)
            set_marker(cur, *marker)
    except Exception as exc:
        if not records_fault(exc):
            raise
        # A record's own: commit the others without it.
        _log.error("store.record_failed", store=where, error=str(exc))
        with conn.transaction():
            cur = conn.cursor()
            for r in records:
                try:
                    with conn.transaction():  # a savepoint per record
                        write_record(cur, r, owner(r), stamp_ends=stamp_ends)
                except Exception as one:
                    if not records_fault(one):
                        raise
                    lost.append((r, one))
            set_marker(cur, *marker)
