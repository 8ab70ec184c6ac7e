"""A context policy's rewrite of a session's history is recorded as what it changed —
messages and ``[start, stop]`` runs of the history before it — not as the whole history
again: that made the store grow with the square of a session's length, and each such
turn encode and copy the whole history on the event loop (~45 ms at 1M tokens here).

Each turn's prompt reads back as it was sent; resumed from any cut, a run whose
policies rewrite on every turn ends as the uninterrupted one; a damaged delta is a
StoreError naming the turn; a store of schema version 1 (whole histories) still
resumes, and is marked version 2 on open, which an older agentflow refuses; a newer
version is refused. On SQLite, and on PostgreSQL where a server can run."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentflow import Agent, Event, FleetResult, StoreError
from agentflow._context_chain import Binding, Link, LinkSession
from agentflow.context import ContextBudget, DropOldest, Fail
from agentflow.embedded import SimTransport, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.store import PostgresStore, SQLiteStore, Store, StoredRun, load_result
from agentflow.testing import PostgresServer
from agentflow.typing import Complete

from .fleets import after_turn_ends, contents, lookup, stored

#: Tool rounds a session runs (it ends after ROUNDS + 1 turns).
ROUNDS = 105
MASK = "[output masked]"
#: Each turn's prompt as sent, by (session id, turn).
Prompts = dict[tuple[str, int], list[dict[str, Any]]]


class Masking(Link["_Masking"]):
    """Observation masking: before every turn, the oldest tool result not masked yet
    (outside the newest six messages) is replaced by a stub — a rewrite on every turn,
    of a history that still grows."""

    def session_for(self, at: Binding) -> _Masking:
        return _Masking(at)


class _Masking(LinkSession):
    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> None:
        for i in range(len(messages) - 6):
            m = messages[i]
            if m["role"] == "tool" and m["content"] != MASK:
                messages[i] = {"role": "tool", "tool_call_id": m["tool_call_id"], "content": MASK}
                return


class Sent(Link["_Sent"]):
    """Last in a chain: notes each turn's prompt as it is sent (after the policies)."""

    def __init__(self) -> None:
        self.prompts: Prompts = {}

    def session_for(self, at: Binding) -> _Sent:
        return _Sent(at, self)


class _Sent(LinkSession):
    def __init__(self, at: Binding, link: Sent) -> None:
        super().__init__(at)
        self.link = link

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> None:
        self.link.prompts[self.at.session_id, turn] = [dict(m) for m in messages]


def team(sent: Sent) -> list[Agent]:
    """A masking agent (a rewrite every turn) and one whose budget drops the oldest
    rounds at its window (a shipped policy: a rewrite every few turns)."""
    common: dict[str, Any] = {
        "model": "sim",
        "instructions": "You look things up. " * 10,
        "tools": [lookup],
        "params": {"max_tokens": 32},
        "max_turns": ROUNDS + 5,
    }
    budget = ContextBudget(
        window=1500, reserve_output=32, margin=0, overflow=[DropOldest(target=1.0), Fail()]
    )
    return [
        Agent(name="masking", context=[Masking(), sent], **common),
        Agent(name="dropping", context=[budget, sent], **common),
    ]


def _transport() -> SimTransport:
    """The simulator, counting the tool rounds each request shows (``sessions=0``): a
    resumed run's fresh simulator would not remember the rounds a dropped history hid
    from it, and would go on calling tools where the uninterrupted one answered. The
    dropping session so runs to ``max_turns`` every time; the masking one answers."""
    textgen = TextGenConfig(
        tool_rounds=ROUNDS, answer_tokens=(8, 24), tool_calls_per_turn=(1, 2), sessions=0
    )
    return SimTransport(EngineDriver(Engine("deepseek-v4.1-flash-gb300", seed=3, textgen=textgen)))


async def _run(
    where: Path | Store, sent: Sent, cut: Callable[[Event], bool] | None = None
) -> FleetResult | None:
    a, b = team(sent)
    sessions = [a.session("task 0", session_id="s0"), b.session("task 1", session_id="s1")]
    return await stored(where, _transport(), lambda f: f.run(sessions, run_id="r"), cut=cut)


async def _resume(where: Path | Store, sent: Sent) -> FleetResult:
    result = await stored(where, _transport(), lambda f: f.resume("r", agents=team(sent)))
    assert result is not None
    return result


async def _load(store: SQLiteStore | PostgresStore) -> StoredRun:
    async with store:
        return await store.load("r")


def _prompts(run: StoredRun) -> Prompts:
    from agentflow.store import stored_prompts  # (new with the delta: not at import)

    return {(s.session_id, t.turn): p for s in run.sessions for t, p in stored_prompts(run, s)}


Whole = tuple[Path, FleetResult, Prompts]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Whole:
    """The uninterrupted run: its store, its result, every prompt it sent."""
    path = tmp_path_factory.mktemp("rewrite") / "whole.db"
    sent = Sent()
    result = run_virtual(_run(path, sent))
    assert result is not None
    statuses = [(s.status, len(s.turns)) for s in result.sessions]
    assert statuses == [("completed", ROUNDS + 1), ("max_turns", ROUNDS + 5)]
    return path, result, sent.prompts


def _rewrites(path: Path, session_id: str) -> dict[int, str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT turn, rewrite FROM turns WHERE session_id=? AND rewrite IS NOT NULL",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    return dict(rows)


def test_each_prompt_reads_back_as_it_was_sent(whole: Whole) -> None:
    path, _, sent = whole
    masked, dropped = _rewrites(path, "s0"), _rewrites(path, "s1")
    assert len(masked) >= ROUNDS - 5 and len(dropped) >= 10  # the policies did rewrite
    assert _prompts(run_virtual(_load(SQLiteStore(path)))) == sent


def test_a_rewrite_on_every_turn_stores_what_changed_not_the_history(whole: Whole) -> None:
    """The bytes a turn's rewrite takes do not grow with the turn number (they grew
    with it: 7.0 KB at turn 20, 29.8 KB at turn 100)."""
    path, _, _ = whole
    masked = _rewrites(path, "s0")
    assert len(masked[100]) / len(masked[20]) < 1.2  # it was 4.25
    late = json.loads(masked[100])
    assert [type(item).__name__ for item in late] == ["list", "dict", "list"]
    assert max(len(text) for text in masked.values()) < 150  # the stub and two runs
    dropped = _rewrites(path, "s1")  # a dropped round: two runs of the history before it
    assert all(len(text) < 40 for text in dropped.values())


@pytest.mark.parametrize("stop_after", [3, 70, 180])
def test_resumed_from_a_cut_the_run_ends_as_the_uninterrupted_one(
    whole: Whole, tmp_path: Path, stop_after: int
) -> None:
    path, done, sent = whole
    cut = tmp_path / "cut.db"
    assert run_virtual(_run(cut, Sent(), after_turn_ends(stop_after))) is None
    resumed = run_virtual(_resume(cut, Sent()))
    assert [s.messages for s in resumed.sessions] == [s.messages for s in done.sessions]
    assert contents(cut, "r") == contents(path, "r")  # the same deltas, row for row
    assert _prompts(run_virtual(_load(SQLiteStore(cut)))) == sent


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("[[0, 9999]]", r"item 0, range \[0, 9999\], is not within the \d+ messages"),
        ("[[0, 3], [5, 2]]", r"item 1, range \[5, 2\]"),
        ('[[0, "3"]]', "item 0 is neither a message nor a"),
        ("[[0, 1, 2]]", "item 0 is neither a message nor a"),
        ('{"role": "user"}', "it is not a list but dict"),
        ("7", "it is not a list but int"),
    ],
)
def test_a_damaged_delta_is_a_store_error_naming_the_turn(
    whole: Whole, tmp_path: Path, value: str, says: str
) -> None:
    """It was a bare TypeError or ValueError (a range read as a message), or — a range
    in bounds but wrong — a prompt silently not the one sent."""
    db = tmp_path / "damaged.db"
    shutil.copy(whole[0], db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE turns SET rewrite=? WHERE session_id='s0' AND turn=30", (value,))
    conn.commit()
    conn.close()
    place = r"run 'r', session 's0', turn 30: its recorded rewrite \(column turns.rewrite\)"
    with pytest.raises(StoreError, match=f"{place} cannot be applied: {says}"):
        run_virtual(load_result(SQLiteStore(db), "r"))


def _as_version_1(db: Path, sent: Prompts) -> None:
    """What an agentflow of schema version 1 would have stored: whole histories."""
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT session_id, turn FROM turns WHERE rewrite IS NOT NULL")
    for sid, turn in rows.fetchall():
        conn.execute(
            "UPDATE turns SET rewrite=? WHERE session_id=? AND turn=?",
            (json.dumps(sent[sid, turn], separators=(",", ":")), sid, turn),
        )
    conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    conn.commit()
    conn.close()


def _version(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        (value,) = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    finally:
        conn.close()
    return str(value)


def test_a_version_1_store_resumes_and_is_marked_version_2(whole: Whole, tmp_path: Path) -> None:
    """Its rewrites are whole histories (a list of messages: a delta with no runs): it
    resumes to the uninterrupted run; opened, it is marked version 2 — an agentflow of
    version 1 refuses it from then on, rather than misread the deltas written after."""
    _, done, sent = whole
    cut = tmp_path / "v1.db"
    cut_sent = Sent()
    assert run_virtual(_run(cut, cut_sent, after_turn_ends(70))) is None
    _as_version_1(cut, cut_sent.prompts)
    old = _rewrites(cut, "s0")
    assert len(old) > 20 and _version(cut) == "1"
    resumed = run_virtual(_resume(cut, Sent()))
    assert _version(cut) == "2"
    assert [s.messages for s in resumed.sessions] == [s.messages for s in done.sessions]
    new = _rewrites(cut, "s0")
    assert {t: new[t] for t in old} == old  # kept as they were, read as they were
    assert _prompts(run_virtual(_load(SQLiteStore(cut)))) == sent


def test_a_store_of_a_newer_version_is_refused_and_left_as_it_was(
    whole: Whole, tmp_path: Path
) -> None:
    db = tmp_path / "v3.db"
    shutil.copy(whole[0], db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 3, this agentflow reads version 2"):
        run_virtual(_load(SQLiteStore(db)))
    assert _version(db) == "3"


# --- PostgreSQL -----------------------------------------------------------------------


def test_postgres_stores_the_delta_and_resumes_to_the_uninterrupted_run(
    whole: Whole, postgres_server: PostgresServer
) -> None:
    _, done, sent = whole
    dsn = postgres_server.create_database("rewrite_cut")
    assert run_virtual(_run(PostgresStore(dsn), Sent(), after_turn_ends(70))) is None
    resumed = run_virtual(_resume(PostgresStore(dsn), Sent()))
    assert [s.messages for s in resumed.sessions] == [s.messages for s in done.sessions]
    run = run_virtual(_load(PostgresStore(dsn)))
    assert _prompts(run) == sent
    late = {t.turn: t.rewrite for t in run.sessions[0].turns}
    assert late[100] is not None and len(late[100]) == 3  # a run, the stub, a run


def test_postgres_marks_a_version_1_store_and_refuses_a_newer_one(postgres_db: str) -> None:
    def version() -> str:
        with psycopg.connect(postgres_db) as conn:
            row = conn.execute(
                "SELECT value FROM agentflow.meta WHERE key = 'schema_version'"
            ).fetchone()
        assert row is not None
        return str(row[0])

    def mark(value: str) -> None:
        with psycopg.connect(postgres_db, autocommit=True) as conn:
            conn.execute(
                "UPDATE agentflow.meta SET value = %s WHERE key = 'schema_version'", (value,)
            )

    async def open_close() -> None:
        async with PostgresStore(postgres_db):
            pass

    run_virtual(open_close())
    assert version() == "2"
    mark("1")
    run_virtual(open_close())
    assert version() == "2"
    mark("3")
    with pytest.raises(StoreError, match="schema version 3, this agentflow reads version 2"):
        run_virtual(open_close())
    assert version() == "3"
