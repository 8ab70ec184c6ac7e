"""A record the writer cannot encode is left out as the store's error: the writer
thread lives on, the next flush raises RecordsLeftOut (a StoreError) naming the file
and the record (it used to hang: only SQLite's errors were caught, anything else ended
the thread), and later records are committed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentflow import RecordsLeftOut
from agentflow.store import RunStarted, SQLiteStore

from ..wait import GUARD_S


class _Unprintable:
    def __repr__(self) -> str:
        raise ValueError("no repr")


def test_an_unencodable_record_is_a_store_error_and_the_writer_lives_on(
    tmp_path: Path,
) -> None:

    async def main() -> tuple[RecordsLeftOut, list[str]]:
        store = SQLiteStore(tmp_path / "e.db")
        await store.open()
        try:
            bad = RunStarted(
                run_id="bad", attempt=0, wall_ns=1, clock_ns=0, sessions=0,
                config={"x": _Unprintable()},
            )  # fmt: skip
            store.write(bad)  # no error on the caller's side: it is queued
            with pytest.raises(RecordsLeftOut, match=r"e\.db: 1 record\(s\) left out") as info:
                await asyncio.wait_for(store.flush(), GUARD_S)
            store.write(RunStarted(run_id="ok", attempt=0, wall_ns=2, clock_ns=0, sessions=0))
            runs = [r.run_id for r in await asyncio.wait_for(store.runs(), GUARD_S)]
        finally:
            await store.aclose()  # the flush reported the loss: it is not raised again
        return info.value, runs

    error, runs = asyncio.run(main())
    assert "no repr" in str(error)
    assert [(name, repr(exc)) for name, exc in error.lost] == [
        ("RunStarted of run bad", "ValueError('no repr')")
    ]
    assert runs == ["ok"]  # the bad record was left out, the writer went on
