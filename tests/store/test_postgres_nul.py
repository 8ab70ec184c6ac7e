"""A NUL in any text of a record is stored as U+FFFD on PostgreSQL (whose TEXT cannot
hold NUL), as it was only in some columns: a NUL in a tool call's id or name, an
endpoint or a session id made the server refuse the record, which the store then left
out (RecordsLeftOut) where SQLiteStore keeps it."""

from __future__ import annotations

import asyncio

import psycopg

from agentflow._trace import ToolCall
from agentflow.store import PostgresStore, ToolFinished


def test_a_nul_in_a_tool_calls_id_name_or_session_is_stored_not_left_out(
    postgres_db: str,
) -> None:
    record = ToolFinished(
        run_id="r",
        session_id="s\x001",
        turn=0,
        call=ToolCall(index=0, id="call\x00x", name="look\x00up", arguments="{\x00}"),
        output="out\x00",
        is_error=False,
        duration_s=0.0,
    )

    async def main() -> None:
        async with PostgresStore(postgres_db) as store:
            store.write(record)
            await asyncio.wait_for(store.flush(), 60)  # it raised RecordsLeftOut

    asyncio.run(main())
    with psycopg.connect(postgres_db) as conn:
        row = conn.execute(
            "SELECT session_id, call_id, name, arguments, output FROM agentflow.tool_calls"
        ).fetchone()
    assert row == ("s\ufffd1", "call\ufffdx", "look\ufffdup", "{\ufffd}", "out\ufffd")
