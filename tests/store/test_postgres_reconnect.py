"""PostgresStore outlives a lost connection (the server restarted, the network dropped
it, an administrator ended it — here ``pg_terminate_backend``): the batch that met the
loss is committed again on a new connection, reads go on, nothing is lost and no error
is left — a fleet whose store connection is ended mid-run stores what an untouched run
stores. It used to fail every later commit and read until the store closed."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from agentflow import Event, Fleet, FleetResult, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore, StoredRun, _postgres
from agentflow.testing import PostgresServer

from .fleets import agents, driver
from .journal_child import tool_result


def _end_the_stores_connections(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'agentflow' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _calls(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT call_id FROM tool_calls ORDER BY turn").fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("next_use", ["write", "read"])
def test_a_lost_connection_is_replaced_and_nothing_is_lost(postgres_db: str, next_use: str) -> None:
    async def main() -> tuple[int, list[str]]:
        store = PostgresStore(postgres_db)
        await store.open()
        for i in range(3):
            store.write(tool_result(i))
        await store.flush()
        ended = await asyncio.to_thread(_end_the_stores_connections, postgres_db)
        if next_use == "read":  # a read meets the loss first: tried again on a new one
            assert await store.runs() == []  # (it failed: test_postgres_idle_lost.py)
        for i in range(3, 6):  # a batch meets the loss (or the new connection)
            store.write(tool_result(i))
        await store.flush()  # committed on a new connection: no error left
        conflicts = await store.conflicts("r")  # reads go on; nothing was written twice
        await store.aclose()
        return ended, conflicts

    ended, conflicts = asyncio.run(main())
    assert ended == 1
    assert conflicts == []
    assert _calls(postgres_db) == [f"call-{i}" for i in range(6)]


def test_while_no_connection_can_be_made_the_batch_waits_for_one(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server is gone for a while (the store's reconnections fail): flushes say so,
    # and the records wait in memory; once a connection is made again, they are
    # committed first, in order, and the error is gone.
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 0.0)

    async def main() -> str:
        store = PostgresStore(postgres_db)
        await store.open()
        store.write(tool_result(0))
        await store.flush()

        def down() -> psycopg.Connection[tuple[object, ...]]:
            raise psycopg.OperationalError("the server is down")

        store._connect = down  # type: ignore[method-assign]
        await asyncio.to_thread(_end_the_stores_connections, postgres_db)
        for i in range(1, 4):
            store.write(tool_result(i))
        with pytest.raises(StoreError, match="a write failed") as info:
            await store.flush()
        del store._connect  # the server is back
        store.write(tool_result(4))
        await store.flush()  # the waiting batch first, then this one: no error left
        await store.aclose()
        return str(info.value)

    message = asyncio.run(main())
    assert "terminat" in message or "closed" in message or "connection" in message
    assert _calls(postgres_db) == [f"call-{i}" for i in range(5)]


def test_a_fleet_whose_store_connection_is_ended_mid_run_stores_all_of_it(
    postgres_server: PostgresServer,
) -> None:
    # A fleet on the simulator records into PostgreSQL; at its 10th finished turn the
    # store's connection is ended. The run goes on, its end flushes without an error, and
    # the stored run equals that of a run whose connection was never touched.
    whole_dsn = postgres_server.create_database("reconnect_whole")
    cut_dsn = postgres_server.create_database("reconnect_cut")

    ended: list[int] = []

    async def run(dsn: str, end_at: int | None) -> FleetResult:
        store = PostgresStore(dsn)
        transport = SimTransport(driver())
        turns = 0

        def end_the_connection(event: Event) -> None:
            nonlocal turns
            if event.type == "turn_end":
                turns += 1
                if turns == end_at:  # blocks the loop a moment: virtual time stands still
                    ended.append(_end_the_stores_connections(dsn))

        team = agents()
        sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(12)]
        fleet = Fleet(
            transport, max_concurrency=4, clock=loop_clock, store=store,
            callbacks=[end_the_connection],
        )  # fmt: skip
        try:
            return await fleet.run(sessions, run_id="run-1")
        finally:
            await store.aclose()
            await transport.aclose()

    async def load(dsn: str) -> StoredRun:
        store = PostgresStore(dsn)
        await store.open()
        try:
            return await store.load("run-1")
        finally:
            await store.aclose()

    whole = run_virtual(run(whole_dsn, None))
    cut = run_virtual(run(cut_dsn, 10))
    assert ended == [1]  # the store's one connection, ended mid-run
    assert [s.messages for s in cut.sessions] == [s.messages for s in whole.sessions]
    a, b = run_virtual(load(whole_dsn)), run_virtual(load(cut_dsn))
    assert sum(len(s.turns) for s in b.sessions) > 12
    assert [(s.session_id, s.status, [t.message for t in s.turns]) for s in b.sessions] == [
        (s.session_id, s.status, [t.message for t in s.turns]) for s in a.sessions
    ]
    assert [
        sorted((r.call_id, r.output) for t in s.turns for r in t.tool_results.values())
        for s in b.sessions
    ] == [
        sorted((r.call_id, r.output) for t in s.turns for r in t.tool_results.values())
        for s in a.sessions
    ]


class _ReplyLost(PostgresStore):
    """Its ``lose``-th commit goes through on the server, then the connection drops before
    the client hears so — what a network cut or a server crash right at ``COMMIT`` does."""

    lose = 2

    def _write(self, conn: Any, records: list[Any], seq: int, lost: list[Any]) -> None:
        super()._write(conn, records, seq, lost)
        self.lose -= 1
        if self.lose == 0:
            conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")


def _writer_markers(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM meta WHERE key LIKE 'writer:%'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("reconnect", ["at-once", "later"])
def test_a_commit_whose_reply_was_lost_is_not_written_twice(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch, reconnect: str
) -> None:
    """The store cannot know from the lost connection whether its COMMIT happened; the
    marker its transaction set says it did, so the batch is not written again (it used
    to be, each of its rows then noted as a conflict). ``later``: no connection can be
    made at first, so the batch is held for the next commit, which asks the marker."""
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 0.0)

    async def main() -> tuple[list[str], str | None]:
        store = _ReplyLost(postgres_db)
        await store.open()
        store.write(tool_result(0))
        await store.flush()
        if reconnect == "later":

            def down() -> psycopg.Connection[tuple[object, ...]]:
                raise psycopg.OperationalError("the server is down")

            store._connect = down  # type: ignore[method-assign]
        for i in range(1, 4):
            store.write(tool_result(i))
        error = None
        try:
            await store.flush()
        except StoreError as exc:
            error = str(exc)
        if reconnect == "later":
            del store._connect  # the server is back
        store.write(tool_result(4))
        await store.flush()  # no error left: nothing was lost
        conflicts = await store.conflicts("r")
        await store.aclose()
        return conflicts, error

    conflicts, error = asyncio.run(main())
    assert conflicts == []
    assert (error is None) == (reconnect == "at-once"), error
    assert _calls(postgres_db) == [f"call-{i}" for i in range(5)]
    assert _writer_markers(postgres_db) == 0  # the store's marker goes when it closes
