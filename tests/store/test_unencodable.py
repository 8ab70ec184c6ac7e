"""A record the writer cannot encode fails its batch as the store's error: the writer
thread lives on, the next flush raises a StoreError naming the file (it used to hang:
only SQLite's errors were caught, anything else ended the thread), and later records
are committed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentflow import StoreError
from agentflow.store import RunStarted, SQLiteStore

from ..wait import GUARD_S


class _Unprintable:
    def __repr__(self) -> str:
        raise ValueError("no repr")


def test_an_unencodable_record_is_a_store_error_and_the_writer_lives_on(
    tmp_path: Path,
) -> None:

    async def main() -> tuple[str, list[str]]:
        store = SQLiteStore(tmp_path / "e.db")
        await store.open()
        try:
            bad = RunStarted(
                run_id="bad", attempt=0, wall_ns=1, clock_ns=0, sessions=0,
                config={"x": _Unprintable()},
            )  # fmt: skip
            store.write(bad)  # no error on the caller's side: it is queued
            with pytest.raises(StoreError, match=r"e\.db: a write failed") as info:
                await asyncio.wait_for(store.flush(), GUARD_S)
            store.write(RunStarted(run_id="ok", attempt=0, wall_ns=2, clock_ns=0, sessions=0))
            runs = [r.run_id for r in await asyncio.wait_for(store.runs(), GUARD_S)]
        finally:
            with pytest.raises(StoreError):  # closing reports the failed batch too
                await store.aclose()
        return str(info.value), runs

    message, runs = asyncio.run(main())
    assert "no repr" in message
    assert runs == ["ok"]  # the failed batch was rolled back
