"""PostgresStore after a try at a commit whose outcome it could not hear (the connection
lost at ``COMMIT``, the server having committed): what that try committed is never
written again, even when the next try is lost too or refused, and what it left out is
still reported. Each try here goes as a script says; the server is a real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import msgspec
import psycopg
import pytest

from agentflow import RecordsLeftOut, StoreError
from agentflow.store import PostgresStore, _postgres

from .journal_child import tool_result


class _Scripted(PostgresStore):
    """A store whose tries at a commit go as ``script`` says, in order (then as they
    would): ``reply-lost`` — committed on the server, then the connection drops before
    the client hears so; ``cut`` — the connection drops before ``COMMIT``; ``refused`` —
    the server refuses it, the connection stays (a statement timeout). ``+down``: the
    server then stays unreachable (``down``) until the test brings it back."""

    script: list[str]
    down = False

    def _write(self, conn: Any, records: list[Any], seq: int, lost: list[Any]) -> None:
        step, _, then = (self.script.pop(0) if self.script else "ok").partition("+")
        if step == "refused":
            raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
        if step != "cut":
            super()._write(conn, records, seq, lost)
        if step in ("cut", "reply-lost"):
            conn.close()
            self.down = then == "down"
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    def _connect(self) -> Any:
        if self.down:
            raise psycopg.OperationalError("the server is down")
        return super()._connect()


def _rows(dsn: str) -> Iterator[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        yield from conn.execute("SELECT call_id FROM tool_calls ORDER BY turn").fetchall()


# The script of the second commit, after a first commit whose reply was lost, the server
# then down for a while: its batch is held, its outcome unknown.
SECOND = {
    # the try is cut, and the new connection made at once commits it
    "lost-then-cut": "cut",
    # ... but the server is down again: the next commit commits it
    "lost-then-cut-then-down": "cut+down",
    # the server refuses the try: the next commit commits it
    "lost-then-refused": "refused",
}


@pytest.mark.parametrize("case", list(SECOND))
def test_what_a_lost_try_committed_is_not_written_again(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 0.0)
    second = SECOND[case]

    async def main() -> tuple[list[str], str, int]:
        store = _Scripted(postgres_db)
        store.script = []
        await store.open()
        store.write(tool_result(0))
        await store.flush()
        store.script = ["reply-lost+down"]  # committed, unheard: held
        store.write(tool_result(1))
        with pytest.raises(StoreError, match="a write failed") as first:
            await store.flush()
        store.script, store.down = [second], False
        store.write(tool_result(2))
        # (Whether this flush still reports the second failure depends on whether the
        # batch and the flush reach the writer together: apart, the flush's own commit
        # commits the held batch first.)
        with contextlib.suppress(StoreError):
            await store.flush()
        assert store.script == []  # it went as scripted
        store.down = False
        store.write(tool_result(3))
        await store.flush()  # everything is in: no error left
        conflicts = await store.conflicts("r")
        await store.aclose()
        return conflicts, str(first.value), store.committed

    conflicts, error, committed = asyncio.run(main())
    assert conflicts == []  # no row was written twice
    assert [r[0] for r in _rows(postgres_db)] == [f"call-{i}" for i in range(4)]
    assert committed == 4
    assert "a write failed" in error and "connection" in error


def test_a_record_a_lost_try_left_out_is_still_reported(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The try left one record out (it cannot be encoded) and committed the rest, and its
    reply was lost: the next connection learns it committed, and the record left out is
    reported as if the reply had come (it used to be dropped without a word)."""
    monkeypatch.setattr(_postgres, "RECONNECT_EVERY_S", 0.0)

    async def main() -> tuple[RecordsLeftOut, int]:
        store = _Scripted(postgres_db)
        store.script = ["reply-lost+down"]
        await store.open()
        for i in range(3):
            r = tool_result(i)
            store.write(r if i != 1 else msgspec.structs.replace(r, output="caf\udce9"))
        with pytest.raises(StoreError, match="a write failed"):
            await store.flush()  # held: no connection to ask whether it committed
        store.down = False
        store.write(tool_result(3))
        with pytest.raises(RecordsLeftOut) as info:
            await store.flush()
        await store.aclose()  # the flush reported the loss: once
        return info.value, store.committed

    error, committed = asyncio.run(main())
    assert [name for name, _ in error.lost] == ["tool call s/call-1 of run r"]
    assert isinstance(error.lost[0][1], UnicodeEncodeError)
    assert committed == 3
    assert [r[0] for r in _rows(postgres_db)] == ["call-0", "call-2", "call-3"]
