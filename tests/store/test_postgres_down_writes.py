"""Writes to a PostgresStore whose first ``open()`` failed start no thread: the records
wait, in order, for the next ``open()`` (or call, or ``aclose()``). Each write used to
start a writer thread that failed to connect and ended — and since it stopped the
watchdog, a new watchdog thread too: 200 writes to a server down started 400 threads."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentflow import StoreError
from agentflow._process import free_port
from agentflow.store import PostgresStore
from agentflow.store._records import RunStarted
from agentflow.testing import PostgresServer

from ..wait import GUARD_S, eventually
from .pg_proxy import Proxy

pytest.importorskip("psycopg")

WRITES = 20


def _started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, attempt=0, wall_ns=1, clock_ns=1, sessions=0)


def test_writes_after_a_failed_open_start_no_thread_and_wait_for_the_next_open(
    postgres_db: str, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    dsn = postgres_db.replace(f":{postgres_server.port}/", f":{port}/")
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    async def main() -> None:
        store = PostgresStore(dsn, connect_timeout_s=2, batch_interval_s=0.001)
        with pytest.raises(StoreError, match="refused"):
            await asyncio.wait_for(store.open(), GUARD_S)
        monkeypatch.setattr(threading.Thread, "start", counted)
        for i in range(WRITES):
            store.write(_started(f"r{i:02}"))
            # (a thread a write started has failed to connect and ended)
            await eventually(lambda: store._thread is None, "no writer thread")
        assert [n for n in started if n.startswith("agentflow-store")] == []
        monkeypatch.undo()
        proxy = Proxy(postgres_server.port, port)  # the server is up
        try:
            await asyncio.wait_for(store.open(), GUARD_S)
            runs = await asyncio.wait_for(store.runs(), GUARD_S)
            assert sorted(r.run_id for r in runs) == [f"r{i:02}" for i in range(WRITES)]
            await asyncio.wait_for(store.aclose(), GUARD_S)
        finally:
            proxy.close()

    asyncio.run(main())
