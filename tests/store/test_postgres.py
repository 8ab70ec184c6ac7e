"""PostgresStore on a real, throwaway PostgreSQL server: it records a fleet run exactly
as SQLiteStore does, keeps duplicates as conflicts, gives each session's lease to one
owner (taken over once it expires on the server's clock, and a worker that lost one can
no longer write into that session), lets two workers share one run, and never stores or
prints the DSN's password."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import psycopg
import pytest

from agentflow import ConfigError, Event, Fleet, FleetResult, RunNotFound, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import LeaseOwner, PostgresStore, SQLiteStore, Store, StoredRun, TurnFinished
from agentflow.testing import PostgresServer

from .fleets import agents, driver, load_run

N = 16
GUARD_S = 60.0


def _sessions(n: int = N) -> list[Any]:
    team = agents()
    return [team[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(n)]


async def _run(store: Store, n: int = N, stop_after_turns: int | None = None) -> FleetResult | None:
    """Run a fleet on the simulator into ``store``, as run "run-1"; with
    ``stop_after_turns``, cancel it after that many turns (returns ``None``)."""
    transport = SimTransport(driver())
    ended = 0
    task: asyncio.Task[FleetResult] | None = None

    def count(event: Event) -> None:
        nonlocal ended
        if event.type == "turn_end":
            ended += 1
            if ended == stop_after_turns and task is not None:
                task.cancel()

    fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=store, callbacks=[count])
    try:
        task = asyncio.ensure_future(fleet.run(_sessions(n), run_id="run-1", run_config={"n": n}))
        try:
            return await task
        except asyncio.CancelledError:
            return None
    finally:
        await store.aclose()
        await transport.aclose()


class _Tee(SQLiteStore):
    """A SQLite store that also writes every record, and takes every lease, in a
    PostgreSQL store: one run's records, stored by both backends."""

    def __init__(self, path: Path, pg: PostgresStore) -> None:
        super().__init__(path)
        self.pg = pg

    async def open(self) -> None:
        await asyncio.gather(super().open(), self.pg.open())

    def write(self, record: Any) -> None:
        super().write(record)
        self.pg.write(record)

    async def flush(self) -> None:
        await asyncio.gather(super().flush(), self.pg.flush())

    async def claim(self, run_id: str, ids: Any, owner: LeaseOwner, ttl_s: float) -> list[str]:
        got, also = await asyncio.gather(
            super().claim(run_id, ids, owner, ttl_s), self.pg.claim(run_id, ids, owner, ttl_s)
        )
        assert got == also
        return got

    async def release(self, run_id: str, owner: LeaseOwner, sessions: Any = None) -> None:
        await asyncio.gather(
            super().release(run_id, owner, sessions), self.pg.release(run_id, owner, sessions)
        )

    async def aclose(self) -> None:
        await asyncio.gather(super().aclose(), self.pg.aclose())


def test_a_run_reads_back_as_from_sqlite(postgres_db: str, tmp_path: Path) -> None:
    """One fleet run recorded by SQLite and PostgreSQL at once loads back equal from
    both: every session, turn (message, trace, metrics), tool result, agent, attempt
    (wall times included) and the run's config; the runs listing says the same."""
    result = run_virtual(_run(_Tee(tmp_path / "runs.db", PostgresStore(postgres_db))))
    assert result is not None and not result.failed
    a = run_virtual(load_run(SQLiteStore(tmp_path / "runs.db")))
    b = run_virtual(load_run(PostgresStore(postgres_db)))
    assert sum(len(s.turns) for s in b.sessions) > 2 * N
    assert any(t.tool_results for s in b.sessions for t in s.turns)
    assert b == a
    assert b.status == "finished" and b.config == {"n": N}
    assert run_virtual(_runs(PostgresStore(postgres_db))) == run_virtual(
        _runs(SQLiteStore(tmp_path / "runs.db"))
    )


async def _runs(store: Store) -> list[Any]:
    try:
        await store.open()
        return await store.runs()
    finally:
        await store.aclose()


def test_a_cancelled_run_resumes_to_the_uninterrupted_one(postgres_server: PostgresServer) -> None:
    whole_dsn = postgres_server.create_database("resume_whole")
    cut_dsn = postgres_server.create_database("resume_cut")
    whole = run_virtual(_run(PostgresStore(whole_dsn)))
    assert whole is not None
    assert run_virtual(_run(PostgresStore(cut_dsn), stop_after_turns=13)) is None

    async def resume() -> FleetResult:
        store = PostgresStore(cut_dsn)
        fleet = Fleet(SimTransport(driver()), max_concurrency=4, clock=loop_clock, store=store)
        try:
            return await fleet.resume("run-1", agents=agents())
        finally:
            await store.aclose()

    resumed = run_virtual(resume())
    assert [s.messages for s in resumed.sessions] == [s.messages for s in whole.sessions]
    a, b = (
        run_virtual(load_run(PostgresStore(whole_dsn))),
        run_virtual(load_run(PostgresStore(cut_dsn))),
    )
    assert [(s.session_id, s.status, s.final_output) for s in b.sessions] == [
        (s.session_id, s.status, s.final_output) for s in a.sessions
    ]
    assert [[t.message for t in s.turns] for s in b.sessions] == [
        [t.message for t in s.turns] for s in a.sessions
    ]
    assert [x.attempt for x in b.attempts] == [0, 1] and b.status == "finished"


def _turn(run_id: str, sid: str, turn: int, text: str, template: TurnFinished) -> TurnFinished:
    return msgspec.structs.replace(
        template, run_id=run_id, session_id=sid, turn=turn,
        message={"role": "assistant", "content": text},
    )  # fmt: skip


async def _template(dsn: str) -> TurnFinished:
    """A real TurnFinished record (from a recorded run) to vary."""
    captured: list[TurnFinished] = []

    class Spy(PostgresStore):
        def write(self, record: Any) -> None:
            if isinstance(record, TurnFinished) and not captured:
                captured.append(record)
            super().write(record)

    await _run(Spy(dsn), n=2)
    return captured[0]


def test_duplicates_are_kept_as_conflicts_never_overwritten(postgres_db: str) -> None:
    async def main() -> tuple[StoredRun, list[str]]:
        tpl = await _template(postgres_db)
        store = PostgresStore(postgres_db)
        try:
            first = (await store.load("run-1")).sessions[0].turns[0].message
            store.write(_turn("run-1", "s00", 0, "a second answer", tpl))
            store.write(_turn("run-1", "s00", 0, "a third answer", tpl))
            await store.flush()
            run = await store.load("run-1")
            assert run.sessions[0].turns[0].message == first
            return run, await store.conflicts("run-1")
        finally:
            await store.aclose()

    run, conflicts = run_virtual(main())
    assert conflicts == ["turn s00/0", "turn s00/0"]
    assert run.sessions[0].turns[0].message["content"] not in ("a second answer", "a third answer")


def test_leases_go_to_one_owner_and_are_taken_over_once_expired(postgres_db: str) -> None:
    """Two stores (two connections, as two workers) claim the same sessions at once:
    each session goes to exactly one. An expired lease (on the server's clock) is taken
    over; its former owner's renewal says it is lost, and its writes are fenced off."""

    async def main() -> None:
        tpl = await _template(postgres_db)  # run-1 with sessions s00, s01
        a, b = PostgresStore(postgres_db), PostgresStore(postgres_db)
        wa, wb = LeaseOwner(token="a"), LeaseOwner(token="b")
        ids = ["s00", "s01"]
        try:
            await asyncio.gather(a.open(), b.open())
            for _ in range(20):
                got_a, got_b = await asyncio.gather(
                    a.claim("run-1", ids, wa, 60), b.claim("run-1", ids, wb, 60)
                )
                assert sorted(got_a + got_b) == ids  # each exactly once
                assert await a.claim("run-1", ids, wa, 60) == got_a  # its own: still its
                assert await b.claim("run-1", got_a, wb, 60) == []
                await asyncio.gather(a.release("run-1", wa), b.release("run-1", wb))
            # A holds both for 0.3 s; B gets them only once that has passed.
            assert sorted(await a.claim("run-1", ids, wa, 0.3)) == ids
            assert await b.claim("run-1", ids, wb, 60) == []
            deadline = time.monotonic() + GUARD_S
            while not (got := await b.claim("run-1", ids, wb, 60)):
                assert time.monotonic() < deadline, "the lease never expired"
                await asyncio.sleep(0.05)
            assert sorted(got) == ids
            assert await a.renew("run-1", wa, 60) == []  # lost
            a.write(_turn("run-1", "s00", 99, "late", tpl))  # A no longer holds s00
            b.write(_turn("run-1", "s01", 98, "b's", tpl))  # B does
            await asyncio.gather(a.flush(), b.flush())
            run = await b.load("run-1")
            turns = {s.session_id: [t.turn for t in s.turns] for s in run.sessions}
            assert 99 not in turns["s00"] and 98 in turns["s01"]
            assert await b.conflicts("run-1") == ["fenced turn s00/99"]
        finally:
            await asyncio.gather(a.aclose(), b.aclose())

    asyncio.run(asyncio.wait_for(main(), GUARD_S))


def test_two_workers_split_a_run_and_end_it_as_one_would(postgres_server: PostgresServer) -> None:
    """Two fleets (each with its own store and connection) resume one run at once: they
    share its sessions (each ran some, none ran one twice), both return every session
    completed, and the store ends as an uninterrupted run's."""
    whole_dsn = postgres_server.create_database("split_whole")
    dsn = postgres_server.create_database("split")
    n = 24
    assert run_virtual(_run(PostgresStore(whole_dsn), n=n)) is not None
    assert run_virtual(_run(PostgresStore(dsn), n=n, stop_after_turns=5)) is None

    async def both() -> list[FleetResult]:
        stores = [PostgresStore(dsn), PostgresStore(dsn)]
        transports = [SimTransport(driver()), SimTransport(driver())]
        fleets = [
            Fleet(t, max_concurrency=2, clock=loop_clock, store=s, lease_ttl_s=5)
            for t, s in zip(transports, stores, strict=True)
        ]
        try:
            return list(await asyncio.gather(*(f.resume("run-1", agents=agents()) for f in fleets)))
        finally:
            for s, t in zip(stores, transports, strict=True):
                await s.aclose()
                await t.aclose()

    results = run_virtual(both())
    for r in results:
        assert [s.status for s in r.sessions] == ["completed"] * n
    whole, split = (
        run_virtual(load_run(PostgresStore(whole_dsn))),
        run_virtual(load_run(PostgresStore(dsn))),
    )
    assert [[t.message for t in s.turns] for s in split.sessions] == [
        [t.message for t in s.turns] for s in whole.sessions
    ]
    resumed_by = {t.attempt for s in split.sessions for t in s.turns if t.attempt > 0}
    assert resumed_by == {1, 2}  # both workers ran turns
    for s in split.sessions:  # one worker per session after the cut
        assert len({t.attempt for t in s.turns if t.attempt > 0}) <= 1, s.session_id
    assert split.status == "finished"
    store = PostgresStore(dsn)
    assert run_virtual(_conflicts(store)) == []


async def _conflicts(store: PostgresStore) -> list[str]:
    try:
        await store.open()
        return await store.conflicts("run-1")
    finally:
        await store.aclose()


def test_the_password_is_never_stored_nor_shown(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.create_database("secrets")
    password = urlsplit(dsn).password
    assert password and password in dsn
    store = PostgresStore(dsn)
    assert password not in repr(store) and password not in store.dsn
    assert password not in str(vars(store))
    assert run_virtual(_run(store)) is not None
    with psycopg.connect(dsn) as conn:
        dump = conn.execute(
            "SELECT string_agg(t::text, ' ') FROM (SELECT * FROM agentflow.runs) t"
        ).fetchone()
        everything = [dump]
        for table in ("runs", "run_attempts", "texts", "agents", "sessions", "turns",
                      "tool_calls", "conflicts", "meta"):  # fmt: skip
            everything.append(
                conn.execute(f"SELECT string_agg(t::text, ' ') FROM agentflow.{table} t").fetchone()
            )
    assert password not in repr(everything)
    # A wrong password: the error names the server, never the password given.
    wrong = dsn.replace(password, password[::-1])
    bad = PostgresStore(wrong)
    with pytest.raises(StoreError) as caught:
        run_virtual(bad.open())
    assert password[::-1] not in str(caught.value) and "password" in str(caught.value).lower()
    assert password[::-1] not in repr(bad)
    # An unparseable DSN: its text is not quoted back.
    with pytest.raises(ConfigError) as bad_dsn:
        PostgresStore("host=x password=s3cr3t-value port")
    assert "s3cr3t-value" not in str(bad_dsn.value)


def test_errors_are_defined(postgres_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db)
        try:
            await store.open()
            with pytest.raises(RunNotFound, match="no run 'nope'"):
                await store.load("nope")
            with pytest.raises(RunNotFound):
                await store.start_attempt("nope", 0, 0)
        finally:
            await store.aclose()
        with psycopg.connect(postgres_db, autocommit=True) as conn:
            conn.execute("UPDATE agentflow.meta SET value = '999' WHERE key = 'schema_version'")
        with pytest.raises(StoreError, match="schema version 999, this agentflow reads version"):
            await PostgresStore(postgres_db).open()

    run_virtual(main())
    with pytest.raises(ConfigError, match="schema must be an SQL identifier"):
        PostgresStore(postgres_db, schema="a; DROP TABLE runs")
    with pytest.raises(ConfigError, match="max_batch"):
        PostgresStore(postgres_db, max_batch=0)
    monkeypatch.setitem(sys.modules, "psycopg.conninfo", None)
    with pytest.raises(ConfigError, match=r"pip install 'agentflow\[pg\]'"):
        PostgresStore(postgres_db)
