"""PostgresStore holds the batches the server cannot take — at most ``max_held``
records waiting to be committed. Past that, ``write`` raises StoreBacklogFull (at once:
nothing waits for the server) instead of holding more; what it holds is kept, in order,
and committed once the server is back. It used to hold without a bound: a long outage
grew the process's memory until it died, losing everything held."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest

from agentflow import ConfigError, Event, Fleet, FleetResult, StoreBacklogFull, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore, SessionEnded, _pg_conn, _postgres
from agentflow.testing import PostgresServer

from ..wait import GUARD_S
from .fleets import agents, driver
from .journal_child import tool_result
from .pg_proxy import Proxy

LIMIT = 5


@pytest.fixture
def proxy(postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    monkeypatch.setattr(_pg_conn, "WATCHDOG_MARGIN_S", 1.0)
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 0.0)  # the next commit reconnects
    p = Proxy(postgres_server.port)
    yield p
    p.close()


def _calls(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [
            r[0] for r in conn.execute("SELECT call_id FROM agentflow.tool_calls ORDER BY turn")
        ]


def test_past_max_held_records_waiting_a_write_is_refused_and_nothing_held_is_lost(
    postgres_db: str, proxy: Proxy
) -> None:
    async def main() -> None:
        store = PostgresStore(
            proxy.dsn(postgres_db), statement_timeout_s=1, connect_timeout_s=2, max_held=LIMIT
        )
        await asyncio.wait_for(store.open(), GUARD_S)
        store.write(tool_result(0))
        await asyncio.wait_for(store.flush(), GUARD_S)
        assert store.waiting == 0
        proxy.cut()  # the server cannot be reached from now on
        for i in (1, 2, 3):
            store.write(tool_result(i))
        with pytest.raises(StoreError, match="a write failed"):  # held
            await asyncio.wait_for(store.flush(), GUARD_S)
        store.write(tool_result(4))
        store.write(tool_result(5))  # LIMIT records wait: 3 held, 2 in the loop's batch
        assert store.waiting == LIMIT
        for _ in range(2):  # refused, each time, at once
            with pytest.raises(StoreBacklogFull, match=r"5 record\(s\) already wait") as info:
                store.write(tool_result(6))
        assert (info.value.waiting, info.value.limit) == (LIMIT, LIMIT)
        assert "max_held=5" in str(info.value)
        assert "the last commit failed" in str(info.value)
        # A session's end is still taken (a session refused a turn must be able to end).
        ended = SessionEnded(
            run_id="r", session_id="s", status="error", final_output=None, error="x", turns=1
        )
        store.write(ended)
        proxy.heal()
        await asyncio.wait_for(store.flush(), GUARD_S)  # everything held, in order
        assert store.waiting == 0
        store.write(tool_result(6))  # taken again
        await asyncio.wait_for(store.aclose(), GUARD_S)

    asyncio.run(main())
    assert _calls(postgres_db) == [f"call-{i}" for i in range(7)]


def test_max_held_is_a_count(postgres_db: str) -> None:
    for bad in (0, -1, 1.5, True, "9"):
        with pytest.raises(ConfigError, match=r"PostgresStore\.max_held must be an int ≥ 1"):
            PostgresStore(postgres_db, max_held=bad)  # type: ignore[arg-type]


def test_a_fleet_whose_backlog_fills_ends_its_sessions_and_resumes_once_the_server_is_back(
    postgres_db: str, proxy: Proxy
) -> None:
    """The network is cut after 5 turns; once the store holds ``max_held`` turns and tool
    results, each session fails with StoreBacklogFull at its next one (the fleet neither
    hangs nor breaks), and ends as recorded. The network is back after the first such
    failure: what was held is committed, and a resume completes every session."""
    team = agents()
    sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(16)]

    async def run() -> FleetResult:
        store = PostgresStore(
            proxy.dsn(postgres_db), statement_timeout_s=1, connect_timeout_s=2, max_held=20
        )
        transport = SimTransport(driver())
        turns = 0

        def watch(event: Event) -> None:
            nonlocal turns
            if event.type == "turn_end":
                turns += 1
                if turns == 5:
                    proxy.cut()
            elif event.type == "session_end" and isinstance(event.result.error, StoreBacklogFull):
                proxy.heal()

        fleet = Fleet(
            transport, max_concurrency=4, clock=loop_clock, store=store, callbacks=[watch]
        )
        try:
            return await fleet.run(sessions, run_id="run-1")
        finally:
            await store.aclose()
            await transport.aclose()

    result = run_virtual(run())
    failed = [s for s in result.sessions if s.status != "completed"]
    assert failed
    assert all(isinstance(s.error, StoreBacklogFull) for s in failed)

    async def resume() -> FleetResult:
        store = PostgresStore(postgres_db)
        transport = SimTransport(driver())
        try:
            fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=store)
            resumed = await fleet.resume("run-1", agents=team)
            assert await store.conflicts("run-1") == []  # nothing recorded twice
            return resumed
        finally:
            await store.aclose()
            await transport.aclose()

    resumed = run_virtual(resume())
    assert [s.status for s in resumed.sessions] == ["completed"] * 16
