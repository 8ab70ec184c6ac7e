"""A key longer than PostgreSQL can index (~2,700 bytes: a btree index row) is the
record's own fault, not the server's: the record is left out and named once
(``RecordsLeftOut``), and every other record — of its batch and of every later one — is
committed. psycopg files the server's refusal (``ProgramLimitExceeded``, SQLSTATE class
54) under ``OperationalError``, so the store took it for the server's fault: it held the
whole batch and tried it again at every commit, and nothing was ever committed again
(until ``StoreBacklogFull``). A name a user gives (run id, session id, agent name) longer
than ``MAX_NAME_BYTES`` is refused up front on either store with a ``ConfigError``."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable

import msgspec
import psycopg
import pytest

from agentflow import ConfigError, Fleet, RecordsLeftOut
from agentflow._trace import ToolCall
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore, Store
from agentflow.store._records import MAX_NAME_BYTES, check_name

from ..wait import GUARD_S
from .fleets import agents, driver, run_ids
from .journal_child import tool_result

#: Longer than a btree index row (and random: it does not compress below the limit).
LONG_ID = "x" + secrets.token_hex(1500)


def test_a_tool_result_whose_key_postgres_cannot_index_is_left_out_alone(
    postgres_db: str,
) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_db, max_held=10)
        await store.open()
        store.write(tool_result(0))
        bad = tool_result(1)
        store.write(
            msgspec.structs.replace(
                bad, call=ToolCall(index=0, id=LONG_ID, name="f", arguments="{}")
            )
        )
        store.write(tool_result(2))
        with pytest.raises(RecordsLeftOut, match=r"1 record\(s\) left out") as err:
            await asyncio.wait_for(store.flush(), GUARD_S)
        ((what, exc),) = err.value.lost
        assert what == f"tool call s/{LONG_ID[:60]}…(3001 chars) of run r"
        assert isinstance(exc, psycopg.errors.ProgramLimitExceeded)
        assert store.waiting == 0  # nothing held
        for i in range(3, 30):  # more than max_held: each commit goes through
            store.write(tool_result(i))
            await asyncio.wait_for(store.flush(), GUARD_S)
        await store.aclose()

    asyncio.run(main())
    with psycopg.connect(postgres_db) as conn:
        rows = conn.execute("SELECT call_id FROM agentflow.tool_calls ORDER BY turn").fetchall()
    assert [r[0] for r in rows] == [f"call-{i}" for i in range(30) if i != 1]


async def _run(store: Store, run_id: str, session_id: str) -> None:
    transport = SimTransport(driver())
    try:
        fleet = Fleet(transport, clock=loop_clock, store=store)
        await fleet.run([agents()[0].session("task", session_id=session_id)], run_id=run_id)
    finally:
        await store.aclose()
        await transport.aclose()


def test_a_session_id_longer_than_a_store_keeps_is_refused_before_anythingrun_ids(
    make_store: Callable[[], Store],
) -> None:
    long = "s" * (MAX_NAME_BYTES + 1)
    with pytest.raises(ConfigError, match=r"session_id must be at most 512 bytes.*got 513") as e:
        run_virtual(_run(make_store(), "r", long))
    assert "(513 chars)" in str(e.value) and long not in str(e.value)  # named, not repeated
    with pytest.raises(ConfigError, match=r"run_id must be at most 512 bytes"):
        run_virtual(_run(make_store(), "r" * 600, "s"))
    assert asyncio.run(run_ids(make_store())) == []
    run_virtual(_run(make_store(), "r" * MAX_NAME_BYTES, "s" * MAX_NAME_BYTES))  # the limit
    assert asyncio.run(run_ids(make_store())) == ["r" * MAX_NAME_BYTES]


def test_the_limit_is_in_utf8_bytes() -> None:
    check_name("é" * (MAX_NAME_BYTES // 2), "x")
    with pytest.raises(ConfigError, match="got 514"):
        check_name("é" * (MAX_NAME_BYTES // 2 + 1), "x")
