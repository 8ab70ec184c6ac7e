"""PostgresStore.aclose() does not block the event loop: the store's commit marker is
dropped by the closing call itself, on the writer thread, before that call answers.
aclose() used to join the thread synchronously while the thread dropped the marker (a
DELETE that can wait on a lock up to statement_timeout_s), freezing the loop meanwhile."""

from __future__ import annotations

import asyncio

import psycopg

from agentflow.store import PostgresStore

from .journal_child import tool_result

GUARD_POLLS = 600  # x 0.1 s: a hang guard only


def _store_waits_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentflow'"
            " AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM meta%'"
        ).fetchone()
    return row is not None and row[0] > 0


def _markers(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM agentflow.meta WHERE key LIKE 'writer:%'"
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_aclose_leaves_the_loop_running_while_the_marker_waits_for_a_lock(
    postgres_db: str,
) -> None:
    async def main() -> tuple[bool, bool]:
        store = PostgresStore(postgres_db, statement_timeout_s=20)
        await store.open()
        store.write(tool_result(0))
        await store.flush()  # the commit set the store's marker row
        assert await asyncio.to_thread(_markers, postgres_db) == 1
        blocker: psycopg.Connection[tuple[object, ...]] = await asyncio.to_thread(
            lambda: psycopg.connect(postgres_db)
        )
        await asyncio.to_thread(blocker.execute, "LOCK TABLE agentflow.meta IN EXCLUSIVE MODE")
        closing = asyncio.create_task(store.aclose())
        seen = False
        for _ in range(GUARD_POLLS):  # this loop runs only while the event loop is free
            await asyncio.sleep(0.1)
            if await asyncio.to_thread(_store_waits_on_a_lock, postgres_db):
                seen = True
                break
        still_closing = not closing.done()
        await asyncio.to_thread(blocker.rollback)  # the lock goes: the DELETE runs
        await asyncio.wait_for(closing, 60)
        await asyncio.to_thread(blocker.close)
        return seen, still_closing

    seen, still_closing = asyncio.run(main())
    assert seen, "the loop never ran while the store's DELETE waited for the lock"
    assert still_closing
    assert _markers(postgres_db) == 0  # dropped before aclose() returned
