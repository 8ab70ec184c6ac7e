"""A finished turn becomes its row on the thread that writes it (the event loop), not on
the writer thread: ``SQLiteStore.write`` queues a ``PreparedTurn`` whose JSON columns
are already encoded. What is stored is the same as when the writer encoded it; a turn
whose context policy rewrote the history, and a turn that cannot be encoded, are
queued as records and handled by the writer as before (an encoding error is the
store's error, not the loop's)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentflow import Fleet, SQLiteStore, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import Record, TurnFinished
from agentflow.store import _sqlite_io as io
from agentflow.store._codec import encode

from ..wait import GUARD_S
from .fleets import agents, driver


class Spy(SQLiteStore):
    """Keeps every record written to it and every item the loop handed the writer."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.records: list[Record] = []
        self.handed: list[Any] = []

    def write(self, record: Record) -> None:
        self.records.append(record)
        super().write(record)

    def _commit(self, conn: Any, records: list[Any]) -> None:
        self.handed.extend(records)
        super()._commit(conn, records)


def _run(path: Path) -> tuple[Spy, Any, Any]:
    team = agents()

    async def main() -> tuple[Spy, Any, Any]:
        store = Spy(path)
        transport = SimTransport(driver())
        try:
            sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i}") for i in range(3)]
            result = await Fleet(transport, clock=loop_clock, store=store).run(sessions)
            return store, result, await store.load(result.run_id or "")
        finally:
            await store.aclose()
            await transport.aclose()

    return run_virtual(main())


def test_turns_reach_the_writer_as_rows_and_load_back_unchanged(tmp_path: Path) -> None:
    """Every finished turn is handed to the writer as a PreparedTurn (no TurnFinished
    reaches it); its row is the one the writer would have built; the loaded run holds
    each turn's message, trace and prompt as recorded."""
    store, result, loaded = _run(tmp_path / "p.db")
    turns = [r for r in store.records if isinstance(r, TurnFinished)]
    prepared = [x for x in store.handed if type(x) is io.PreparedTurn]
    assert len(turns) == sum(len(s.turns) for s in result.sessions) > 3
    assert not [x for x in store.handed if isinstance(x, TurnFinished)]
    assert [(p.run_id, p.key, p.row) for p in prepared] == [
        (t.run_id, f"{t.session_id}/{t.turn}", io._turn_row(t)) for t in turns
    ]
    by_id = {s.session_id: s for s in loaded.sessions}
    for s in result.sessions:
        stored = by_id[s.session_id].turns
        assert [t.message for t in stored] == [m for m in s.messages if m["role"] == "assistant"]
        assert [encode(t.trace) for t in stored] == [encode(t.trace) for t in s.turns]
        assert [t.prompt for t in stored] == [t.prompt for t in s.turns]


def test_a_rewritten_history_is_left_to_the_writer(tmp_path: Path) -> None:
    """A turn whose policy rewrote the history is queued as the record itself: the
    whole conversation is encoded on the writer thread, not on the loop."""
    store, _, _ = _run(tmp_path / "r.db")
    turn = next(r for r in store.records if isinstance(r, TurnFinished))
    rewritten = msgspec.structs.replace(turn, rewrite=[{"role": "user", "content": "x"}])
    assert io.prepare(rewritten) is rewritten
    assert type(io.prepare(turn)) is io.PreparedTurn


class _Unprintable:
    def __repr__(self) -> str:
        raise ValueError("no repr")


def test_a_turn_that_cannot_be_encoded_fails_in_the_store_not_on_the_loop(
    tmp_path: Path,
) -> None:
    """``write`` does not raise on the loop when a turn's message cannot be encoded: the
    record goes to the writer as it is, its batch fails there, and the next flush
    raises a StoreError naming the file."""
    store, _, _ = _run(tmp_path / "e.db")
    turn = next(r for r in store.records if isinstance(r, TurnFinished))
    bad = msgspec.structs.replace(
        turn, turn=99, message={"role": "assistant", "content": _Unprintable()}
    )
    assert io.prepare(bad) is bad

    async def main() -> None:
        other = SQLiteStore(tmp_path / "e2.db")
        await other.open()
        try:
            other.write(bad)  # must not raise here
            await asyncio.wait_for(other.flush(), GUARD_S)
        finally:
            await other.aclose()

    with pytest.raises(StoreError, match=r"e2\.db: a write failed"):
        asyncio.run(main())
