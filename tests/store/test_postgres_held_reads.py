"""While records written before wait to be committed — their batch refused by the
server on a live connection (here a statement timeout behind another connection's
lock), or the server unreachable — a read or a claim raises a StoreError saying so: it
would not see them. It answered without them, silently (``load`` showed a session
still pending after its end was written), though the store promises that a read sees
every record written before it; a flush at the same moment raised. A renewal still
goes through (where the server lets it): the leases must not expire meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from agentflow import Agent, StoreError
from agentflow.store import LeaseOwner, PostgresStore, RunStarted, SessionEnded, SessionStarted
from agentflow.store._codec import agent_info

from ..wait import GUARD_S
from .journal_child import tool_result

HELD = r"record\(s\) written before are not committed yet \(.*QueryCanceled"


def test_reads_and_claims_raise_while_a_batch_is_held(postgres_db: str) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db, statement_timeout_s=0.5)
        await store.open()
        store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=1))
        store.write(
            SessionStarted(run_id="r", session_id="s", position=0,
                           agent=agent_info(Agent(name="a", model="m")),
                           task=[{"role": "user", "content": "hi"}], metadata={})
        )  # fmt: skip
        await store.flush()
        owner = LeaseOwner()
        assert await store.claim("r", ["s"], owner, 60) == ["s"]
        locker: psycopg.Connection[tuple[Any, ...]]
        locker = await asyncio.to_thread(lambda: psycopg.connect(postgres_db))
        locker.execute("LOCK TABLE agentflow.tool_calls IN SHARE MODE")  # until rollback
        try:
            store.write(tool_result(0))  # (run r, session s)
            store.write(
                SessionEnded(run_id="r", session_id="s", status="completed",
                             final_output="bye", error=None, turns=0)
            )  # fmt: skip
            with pytest.raises(StoreError, match=f"run 'r' not read: 2 {HELD}"):
                await asyncio.wait_for(store.load("r"), GUARD_S)
            with pytest.raises(StoreError, match=f"runs not listed: 2 {HELD}"):
                await asyncio.wait_for(store.runs(), GUARD_S)
            with pytest.raises(StoreError, match="conflicts of run 'r' not read"):
                await asyncio.wait_for(store.conflicts("r"), GUARD_S)
            with pytest.raises(StoreError, match="sessions of run 'r' not claimed"):
                await asyncio.wait_for(store.claim("r", ["s"], LeaseOwner(), 60), GUARD_S)
            assert await asyncio.wait_for(store.renew("r", owner, 60), GUARD_S) == ["s"]
        finally:
            locker.rollback()
            locker.close()
        await asyncio.wait_for(store.flush(), GUARD_S)  # the held batch is committed
        assert (await store.load("r")).sessions[0].status == "completed"
        assert await store.conflicts("r") == []
        await store.aclose()

    asyncio.run(main())
