"""A record that fails on its own — here a tool result whose text holds a lone
surrogate, which neither SQLite nor PostgreSQL can take — is left out of its commit and
named by the next flush's ``RecordsLeftOut`` (a ``StoreError``); every other record of
its batch is committed (the whole batch used to be lost: up to 5 s of every session's
records)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import msgspec
import psycopg
import pytest

from agentflow import Fleet, RecordsLeftOut, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore, SQLiteStore, ToolFinished

from .fleets import agents, driver
from .journal_child import tool_result

LEFT_OUT = r"1 record\(s\) left out.*tool call s/call-3 of run r.*surrogates not allowed"


async def _write_a_batch_with_one_bad_record(store: SQLiteStore | PostgresStore) -> int:
    await store.open()
    for i in range(6):
        r = tool_result(i)
        store.write(r if i != 3 else msgspec.structs.replace(r, output="caf\udce9"))
    with pytest.raises(RecordsLeftOut, match=LEFT_OUT) as err:
        await store.flush()
    ((what, exc),) = err.value.lost
    assert what == "tool call s/call-3 of run r" and isinstance(exc, UnicodeEncodeError)
    assert isinstance(err.value, StoreError) and err.value.where in str(err.value)
    store.write(tool_result(6))  # later records go on being committed
    # Reported once: it used to stay, and every later flush (so every later run, resume
    # and close of the store) raised it again.
    await store.flush()
    await store.aclose()
    # Closed: a use now says so (it used to raise the loss again, as if it were why).
    with pytest.raises(StoreError, match="the store is closed"):
        await store.runs()
    return store.committed  # the records committed, not those left out


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
def test_sqlite_leaves_out_only_the_record_that_fails(tmp_path: Path, journal: bool) -> None:
    db = tmp_path / "s.db"
    assert asyncio.run(_write_a_batch_with_one_bad_record(SQLiteStore(db, journal=journal))) == 6
    rows = sqlite3.connect(db).execute("SELECT call_id FROM tool_calls ORDER BY turn").fetchall()
    assert rows == [(f"call-{i}",) for i in (0, 1, 2, 4, 5, 6)]


def test_postgres_leaves_out_only_the_record_that_fails(postgres_db: str) -> None:
    assert asyncio.run(_write_a_batch_with_one_bad_record(PostgresStore(postgres_db))) == 6
    with psycopg.connect(postgres_db) as conn:
        rows = conn.execute("SELECT call_id FROM tool_calls ORDER BY turn").fetchall()
    assert rows == [(f"call-{i}",) for i in (0, 1, 2, 4, 5, 6)]


def _bad(i: int) -> ToolFinished:
    return msgspec.structs.replace(tool_result(i), output="caf\udce9")


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
def test_losses_before_a_flush_are_all_named_then_cleared(tmp_path: Path, journal: bool) -> None:
    """Two commits each leave a record out before a flush: the flush names both (the
    second used to be only logged), the next one raises nothing, and a later loss is
    reported again."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s.db", journal=journal)
        await store.open()
        store.write(_bad(1))
        await store.runs()  # a call: what was written before it is committed
        store.write(_bad(2))
        await store.runs()
        with pytest.raises(RecordsLeftOut) as err:
            await store.flush()
        assert [what for what, _ in err.value.lost] == [
            "tool call s/call-1 of run r",
            "tool call s/call-2 of run r",
        ]
        await store.flush()
        store.write(_bad(3))
        with pytest.raises(RecordsLeftOut, match="s/call-3"):
            await store.flush()
        await store.aclose()

    asyncio.run(main())


def test_a_loss_does_not_fail_a_later_run_on_the_store(tmp_path: Path) -> None:
    """The run that lost a record is told (its flush); a later run, and its resume, on
    the same store are not."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        transport = SimTransport(driver())
        try:
            await store.open()
            store.write(_bad(0))
            with pytest.raises(RecordsLeftOut):
                await store.flush()
            (a,) = agents(1)
            fleet = Fleet(transport, clock=loop_clock, store=store)
            result = await fleet.run([a.session("hi", session_id="x")], run_id="later")
            assert [s.status for s in result.sessions] == ["completed"]
            await fleet.resume("later", agents=[a])
        finally:
            await transport.aclose()
            await store.aclose()

    run_virtual(main())


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
def test_a_record_breaking_not_null_is_left_out_not_filed_as_a_duplicate(
    tmp_path: Path, journal: bool
) -> None:
    """A NaN binds as NULL: a tool result with ``duration_s=nan`` fails the column's NOT
    NULL. It used to be filed as a duplicate conflict (any IntegrityError was one) and
    dropped without a word; it is the record's own fault, left out and named. A real
    duplicate is still a conflict."""

    async def main() -> tuple[list[str], RecordsLeftOut]:
        store = SQLiteStore(tmp_path / "n.db", journal=journal)
        await store.open()
        try:
            store.write(tool_result(0))
            store.write(msgspec.structs.replace(tool_result(1), duration_s=float("nan")))
            store.write(tool_result(0))  # a duplicate
            with pytest.raises(RecordsLeftOut) as err:
                await store.flush()
            return await store.conflicts("r"), err.value
        finally:
            await store.aclose()

    conflicts, error = asyncio.run(main())
    assert conflicts == ["tool_call s/call-0"]
    ((what, exc),) = error.lost
    assert what == "tool call s/call-1 of run r"
    assert isinstance(exc, sqlite3.IntegrityError) and "NOT NULL" in str(exc)
