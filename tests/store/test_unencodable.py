"""A record the writer cannot encode is left out as the store's error: the writer
thread lives on, the next flush raises RecordsLeftOut (a StoreError) naming the file
and the record (it used to hang: only SQLite's errors were caught, anything else ended
the thread), and later records are committed."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentflow import ConfigError, Fleet, RecordsLeftOut
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import RunStarted, SQLiteStore, Store

from ..wait import GUARD_S
from .fleets import agents, driver, run_ids


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


async def _run(store: Store, metadata: dict[str, Any] | None, config: Any) -> None:
    transport = SimTransport(driver())
    try:
        fleet = Fleet(transport, clock=loop_clock, store=store)
        sessions = [agents()[0].session(f"task {i}", session_id=f"s{i}") for i in range(3)]
        sessions.append(agents()[0].session("task", session_id="odd", metadata=metadata))
        await fleet.run(sessions, run_id="r", run_config=config)
    finally:
        await store.aclose()
        await transport.aclose()


BAD = os.fsdecode(b"report-\xe9.txt")  # 'report-\udce9.txt': an undecodable file name


@pytest.mark.parametrize(
    ("metadata", "config", "refused"),
    [
        ({"file": BAD}, None, r"session 'odd': metadata\['file'\] holds a lone surrogate"),
        (None, {"input": [BAD]}, r"run_config\['input'\]\[0\] holds a lone surrogate"),
        ({"x": _Unprintable()}, None, r"session 'odd': metadata cannot be kept by a run store"),
    ],
    ids=["metadata", "run_config", "unprintable"],
)
def test_what_a_run_keeps_but_never_sends_is_checked_before_anythingrun_ids(
    make_store: Callable[[], Store], metadata: Any, config: Any, refused: str
) -> None:
    """A session's metadata or the run's config that the store cannot keep is a
    ConfigError naming it, before anything is recorded or run: the run's records were
    left out at its end, after every session ran — with run_config, the run's row, and
    every session's with it."""
    with pytest.raises(ConfigError, match=refused):
        run_virtual(_run(make_store(), metadata, config))
    assert asyncio.run(run_ids(make_store())) == []


def test_metadata_json_has_no_form_for_is_still_kept_as_its_repr(tmp_path: Path) -> None:
    run_virtual(_run(SQLiteStore(tmp_path / "runs.db"), {"when": object()}, None))
    assert asyncio.run(run_ids(SQLiteStore(tmp_path / "runs.db"))) == ["r"]
