"""PostgresStore's watchdog cuts a connection whose server has not answered for
``statement_timeout_s`` + a margin — per answer, not per call. A call of many
statements (a batch's commit, a load) may take longer than that in all while the server
answers each statement in time: it used to be cut once the whole call had taken that
long (the batch then held, the load failed), though the server was there all along.

The watchdog runs in virtual time here (``virtual_wait.py``): a proxy in front of the
server moves the clock by most of the limit at each round trip — each time the store
sends again after an answer — and the watchdog decides at each new time before the
store's statement goes on. A silent partition still ends in a StoreError
(``test_postgres_partition.py``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import psycopg
import pytest

from agentflow import RecordsLeftOut
from agentflow.store import PostgresStore, RunStarted, _pg_conn
from agentflow.testing import PostgresServer

from ..wait import GUARD_S, eventually
from .journal_child import tool_result
from .pg_proxy import Proxy
from .virtual_wait import VirtualTime

STATEMENT_TIMEOUT_S = 1.0  # (the server's, in real time: nothing here waits for it)
LIMIT_S = STATEMENT_TIMEOUT_S + _pg_conn.WATCHDOG_MARGIN_S
STEP_S = 0.6 * LIMIT_S  # one round trip, in virtual time: two exceed the limit


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualTime:
    vt = VirtualTime()
    monkeypatch.setattr(_pg_conn, "time", vt.time())
    monkeypatch.setattr(_pg_conn, "threading", vt.threading())
    return vt


@pytest.fixture
def proxy(postgres_server: PostgresServer) -> Iterator[Proxy]:
    p = Proxy(postgres_server.port)
    yield p
    p.close()


class _RoundTrips:
    """While on, moves ``clock`` by :data:`STEP_S` each time the store sends after the
    server has answered (before the proxy passes what it sent on)."""

    def __init__(self, proxy: Proxy, clock: VirtualTime) -> None:
        self.clock = clock
        self.on = False
        self.steps = 0
        self._answered = threading.Event()
        proxy.on_data = self._seen

    def start(self) -> None:
        self._answered.clear()
        self.on = True

    def _seen(self, to_server: bool, data: bytes) -> None:
        if not self.on:
            return
        if not to_server:
            self._answered.set()
        elif self._answered.is_set():
            self._answered.clear()
            self.steps += 1
            self.clock.advance(STEP_S)


def _store(dsn: str, proxy: Proxy) -> PostgresStore:
    return PostgresStore(proxy.dsn(dsn), statement_timeout_s=STATEMENT_TIMEOUT_S)


def test_a_batch_committed_one_record_at_a_time_is_not_cut_while_the_server_answers(
    postgres_db: str, proxy: Proxy, clock: VirtualTime
) -> None:
    """A batch holding a record that cannot be encoded (a lone surrogate) is committed
    one record at a time, each in a savepoint: some twenty round trips, each a little
    over half the limit. The batch is committed, less that record."""
    trips = _RoundTrips(proxy, clock)
    bad = tool_result(9)
    bad = type(bad)(**{**{f: getattr(bad, f) for f in bad.__struct_fields__}, "output": "\ud800"})

    async def main() -> None:
        store = _store(postgres_db, proxy)
        await asyncio.wait_for(store.open(), GUARD_S)
        for i in range(3):
            store.write(tool_result(i))
        store.write(bad)
        trips.start()
        with pytest.raises(RecordsLeftOut, match="tool call s/call-9"):
            await asyncio.wait_for(store.flush(), GUARD_S)
        trips.on = False
        assert trips.steps > 2  # (the whole batch took many times the limit)
        assert store._watchdog.cuts == 0
        with pytest.raises(RecordsLeftOut):  # (closing reports it too)
            await asyncio.wait_for(store.aclose(), GUARD_S)

    asyncio.run(main())
    with psycopg.connect(postgres_db) as conn:
        rows = conn.execute("SELECT call_id FROM agentflow.tool_calls ORDER BY call_id")
        assert [r[0] for r in rows] == ["call-0", "call-1", "call-2"]


def test_a_load_of_many_statements_is_not_cut_while_the_server_answers(
    postgres_db: str, proxy: Proxy, clock: VirtualTime
) -> None:
    trips = _RoundTrips(proxy, clock)

    async def main() -> None:
        store = _store(postgres_db, proxy)
        await asyncio.wait_for(store.open(), GUARD_S)
        try:
            store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=0))
            await asyncio.wait_for(store.flush(), GUARD_S)
            trips.start()
            run = await asyncio.wait_for(store.load("r"), GUARD_S)
            trips.on = False
            assert run.run_id == "r"
            assert trips.steps > 2
            assert store._watchdog.cuts == 0
        finally:
            trips.on = False
            await asyncio.wait_for(store.aclose(), GUARD_S)

    asyncio.run(main())


def test_a_pipelined_batch_is_answered_statement_by_statement(
    postgres_db: str, proxy: Proxy
) -> None:
    """A batch goes to the server as one pipeline; the server answers each statement as
    it ends — not all at the pipeline's end, as it did — so the watchdog hears from it
    once per statement. Here the batch's second insert waits for another transaction's
    row: the first insert's answer has come meanwhile."""
    answered = threading.Event()

    def seen(to_server: bool, data: bytes) -> None:
        # An insert's command tag (the transaction's BEGIN is answered at once anyway).
        if not to_server and watching.is_set() and b"INSERT" in data:
            answered.set()

    watching = threading.Event()
    proxy.on_data = seen

    async def main() -> None:
        store = PostgresStore(proxy.dsn(postgres_db))
        await asyncio.wait_for(store.open(), GUARD_S)
        blocker = psycopg.connect(postgres_db)
        watcher = psycopg.connect(postgres_db, autocommit=True)
        try:
            blocker.execute(
                "INSERT INTO agentflow.tool_calls VALUES"
                " ('r', 's', 'call-2', 2, 'lookup', '{}', 'x', false, 0, 0)"
            )  # not committed: the store's insert of call-2 waits for it
            store.write(tool_result(1))
            store.write(tool_result(2))
            watching.set()
            flushed = asyncio.ensure_future(store.flush())

            def waits() -> bool:
                sql = (
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentflow'"
                    " AND wait_event_type = 'Lock'"
                )
                row = watcher.execute(sql).fetchone()
                return row is not None and row[0] == 1

            await eventually(waits, "the store's second insert waiting for the lock")
            await eventually(answered.is_set, "the first insert's answer")
            assert not flushed.done()
            blocker.rollback()
            await asyncio.wait_for(flushed, GUARD_S)
        finally:
            blocker.close()
            watcher.close()
            await asyncio.wait_for(store.aclose(), GUARD_S)

    asyncio.run(main())
    with psycopg.connect(postgres_db) as conn:
        rows = conn.execute("SELECT call_id FROM agentflow.tool_calls ORDER BY call_id")
        assert [r[0] for r in rows] == ["call-1", "call-2"]
