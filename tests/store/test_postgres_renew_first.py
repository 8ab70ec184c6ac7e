"""A lease renewal does not wait behind commits: it runs before the records handed over
ahead of it are committed, and does not try a held batch again first. It used to wait
for both — a commit waiting on a lock, or a held batch the server refuses, each up to
``statement_timeout_s`` (60 s by default; twice per call while a batch was held) — and
the leases (60 s, renewed every 20 s) lapsed while the worker was alive: another took
its sessions."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from agentflow import Agent, StoreError
from agentflow.store import LeaseOwner, PostgresStore, RunStarted, SessionStarted
from agentflow.store._codec import agent_info

from ..wait import GUARD_S
from .journal_child import tool_result


async def _run_with_a_session(store: PostgresStore) -> LeaseOwner:
    await store.open()
    store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=1, sessions=1))
    store.write(
        SessionStarted(run_id="r", session_id="s", position=0,
                       agent=agent_info(Agent(name="a", model="m")), task=[], metadata={})
    )  # fmt: skip
    await store.flush()
    owner = LeaseOwner()
    assert await store.claim("r", ["s"], owner, 60) == ["s"]
    return owner


def _lock_tool_calls(dsn: str) -> psycopg.Connection[tuple[Any, ...]]:
    locker = psycopg.connect(dsn)
    locker.execute("LOCK TABLE agentflow.tool_calls IN SHARE MODE")  # until rollback
    return locker


def test_a_renewal_runs_before_the_commit_of_what_was_written_ahead_of_it(
    postgres_db: str,
) -> None:
    async def main() -> None:
        # A statement timeout far past the guard: a renewal behind the commit (which
        # waits on the lock) would not answer until the lock is given back.
        store = PostgresStore(postgres_db, statement_timeout_s=3600, batch_interval_s=10)
        owner = await _run_with_a_session(store)
        locker = await asyncio.to_thread(_lock_tool_calls, postgres_db)
        try:
            # Written from a thread: queued alone, so the writer gathers it with the
            # renewal into one batch (the renewal's put wakes it).
            await asyncio.to_thread(store.write, tool_result(0))
            assert await asyncio.wait_for(store.renew("r", owner, 60), GUARD_S) == ["s"]
        finally:
            locker.rollback()
            locker.close()
        await asyncio.wait_for(store.flush(), GUARD_S)  # then it is committed
        assert await store.conflicts("r") == []
        await store.aclose()

    asyncio.run(main())
    with psycopg.connect(postgres_db) as conn:
        assert conn.execute("SELECT call_id FROM agentflow.tool_calls").fetchall() == [("call-0",)]


def test_a_renewal_does_not_try_a_held_batch_again(postgres_db: str) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db, statement_timeout_s=0.5)
        owner = await _run_with_a_session(store)
        locker = await asyncio.to_thread(_lock_tool_calls, postgres_db)
        try:
            store.write(tool_result(0))
            with pytest.raises(StoreError, match="a write failed"):
                await asyncio.wait_for(store.flush(), GUARD_S)  # held
            tries = store._seq  # (each try at a commit takes the next number)
            for _ in range(3):
                assert await asyncio.wait_for(store.renew("r", owner, 60), GUARD_S) == ["s"]
            assert store._seq == tries  # no try at the held batch: not one statement timeout
            # A flush tries the held batch once (it tried it again after its call was
            # answered: another statement timeout, and a try the renewals above raced).
            with pytest.raises(StoreError, match="a write failed"):
                await asyncio.wait_for(store.flush(), GUARD_S)
            assert await asyncio.wait_for(store.renew("r", owner, 60), GUARD_S) == ["s"]
            assert store._seq == tries + 1
        finally:
            locker.rollback()
            locker.close()
        await asyncio.wait_for(store.flush(), GUARD_S)
        await store.aclose()

    asyncio.run(main())
