"""PostgresStore keeps a session's lease while records written before its release wait
to be committed: released, another worker would claim the session, see nothing of
them, and run its tool calls again (it did: the release went through after the
session's batch had been refused, and both workers ran the session). The server here
refuses the batch for real — a statement timeout behind another connection's table
lock."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from agentflow import StoreError
from agentflow._trace import ToolCall
from agentflow.embedded import run_virtual
from agentflow.store import LeaseOwner, PostgresStore, ToolFinished
from agentflow.testing import PostgresServer

from .test_postgres import _run


def _owner(dsn: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT lease_owner FROM agentflow.sessions WHERE session_id = 's00'"
        ).fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def test_a_lease_is_kept_while_records_written_before_wait(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database("release_kept")
    assert run_virtual(_run(PostgresStore(dsn), n=1, stop_after_turns=1)) is None

    async def main() -> tuple[str, list[str], list[str], bool]:
        a = PostgresStore(dsn, statement_timeout_s=0.5)
        b = PostgresStore(dsn)
        await a.open()
        await b.open()
        mine, theirs = LeaseOwner(), LeaseOwner()
        assert await a.claim("run-1", ["s00"], mine, 60) == ["s00"]
        blocker: psycopg.Connection[tuple[Any, ...]]
        blocker = await asyncio.to_thread(lambda: psycopg.connect(dsn))
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE agentflow.tool_calls IN EXCLUSIVE MODE")
        call = ToolCall(index=0, id="call-X", name="lookup", arguments="{}")
        a.write(
            ToolFinished(run_id="run-1", session_id="s00", turn=0, call=call, output="done",
                         is_error=False, duration_s=0.1)
        )  # fmt: skip
        with pytest.raises(StoreError, match="leases of run 'run-1' kept") as kept:
            await a.release("run-1", mine, ["s00"])
        refused = await b.claim("run-1", ["s00"], theirs, 60)  # still a's
        blocker.execute("ROLLBACK")
        blocker.close()
        await a.flush()  # the kept batch is committed: no error left
        await a.release("run-1", mine, ["s00"])
        taken = await b.claim("run-1", ["s00"], theirs, 60)
        run = await b.load("run-1", ["s00"])
        seen = any("call-X" in t.tool_results for t in run.sessions[0].turns)
        conflicts = await b.conflicts("run-1")
        await a.aclose()
        await b.aclose()
        assert conflicts == []
        return str(kept.value), refused, taken, seen

    message, refused, taken, seen = asyncio.run(main())
    assert "not committed yet" in message
    assert refused == []  # another worker could not take it meanwhile
    assert taken == ["s00"] and seen  # once released, it sees the record
    assert _owner(dsn) is not None
