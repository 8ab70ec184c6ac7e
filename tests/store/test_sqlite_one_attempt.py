"""One attempt at a run at a time through one ``SQLiteStore`` object: two ``Fleet.resume``
of a run through the same store used to both run every session — the run lock let
several attempts through one store, and a lease held by a live attempt of this same
process counted as free — so each tool ran twice and every turn was recorded twice (the
second as a conflict). The second is now refused with a ``StoreError``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentflow import Agent, Fleet, RunNotFound, StoreError, Tool
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import LeaseOwner, RunStarted, SQLiteStore
from agentflow.store import _sqlite_io as io

from .fleets import driver, run_cut


def _team(calls: list[str]) -> list[Agent]:
    def lookup(key: str, count: int = 1) -> str:
        """Look a key up.

        Args:
            key: what to look up.
            count: how many values.
        """
        calls.append(key)
        return f"{count} value(s) of {key!r}"

    return [
        Agent(
            name=f"agent-{i}",
            model="sim",
            instructions="You look things up. " * 10,
            tools=[Tool.from_function(lookup, in_thread=False)],
            params={"max_tokens": 32},
            max_turns=8,
        )
        for i in range(3)
    ]


def test_two_resumes_through_one_store_run_each_session_once(tmp_path: Path) -> None:
    calls: list[str] = []
    db = tmp_path / "two.db"
    run_virtual(run_cut(db, _team(calls), 8, stop_after=2))  # a partial run
    calls.clear()

    async def both() -> tuple[list[object], list[str]]:
        store = SQLiteStore(db)
        t1, t2 = SimTransport(driver()), SimTransport(driver())
        try:
            f1 = Fleet(t1, max_concurrency=4, clock=loop_clock, store=store)
            f2 = Fleet(t2, max_concurrency=4, clock=loop_clock, store=store)
            results = await asyncio.gather(
                f1.resume("run-1", agents=_team(calls)),
                f2.resume("run-1", agents=_team(calls)),
                return_exceptions=True,
            )
            return list(results), await store.conflicts("run-1")
        finally:
            await store.aclose()
            await t1.aclose()
            await t2.aclose()

    results, conflicts = run_virtual(both())
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1, results
    assert isinstance(refused[0], StoreError)
    assert "another attempt through this store" in str(refused[0])
    assert conflicts == []  # no turn or tool result recorded twice
    # (the simulator reuses a few keys across sessions: each call ran once, as a single
    # resume's do)
    twice = calls.copy()
    calls.clear()
    db2 = tmp_path / "one.db"
    run_virtual(run_cut(db2, _team(calls), 8, stop_after=2))
    calls.clear()

    async def one() -> None:
        store, t = SQLiteStore(db2), SimTransport(driver())
        try:
            await Fleet(t, max_concurrency=4, clock=loop_clock, store=store).resume(
                "run-1", agents=_team(calls)
            )
        finally:
            await store.aclose()
            await t.aclose()

    run_virtual(one())
    assert sorted(twice) == sorted(calls)


def test_a_lease_of_a_live_attempt_of_this_process_is_not_free(tmp_path: Path) -> None:
    """Same pid, but its owner still writes the run: not free; once it let go, free."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "live.db")
        try:
            await store.open()
            store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
            a, b = LeaseOwner(), LeaseOwner()
            await store.claim("r", [], a, 60)
            now = time.time_ns()
            later = now + 60 * 10**9
            assert not io._free(str(a), later, str(b), now)
            await store.release("r", a)
            assert io._free(str(a), later, str(b), now)  # ended: taken over at once
        finally:
            await store.aclose()

    asyncio.run(main())


def test_a_refused_start_keeps_no_run_lock(tmp_path: Path) -> None:
    """``start_attempt`` of a run the store does not have: no attempt, no lock left."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "none.db")
        try:
            with pytest.raises(RunNotFound):
                await store.start_attempt("nope", 1, 0)
            assert not store._run_locks.path("nope").exists()
            with pytest.raises(RunNotFound):  # not "another attempt through this store"
                await store.start_attempt("nope", 1, 0)
        finally:
            await store.aclose()

    asyncio.run(main())


def test_a_store_whose_writer_failed_lets_go_of_its_run_locks_when_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread fails on its own (a bug): ``aclose()`` returned at once — the
    store was closed already — without letting go of the run's lock, so no other
    process (or store) could resume the run until this process ended."""
    db = tmp_path / "failed.db"

    async def main() -> None:
        store, other = SQLiteStore(db), SQLiteStore(db)
        try:
            await store.open()
            store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=0))
            await store.claim("r", [], LeaseOwner(), 60)

            def broken(conn: object, batch: object) -> bool:
                raise RuntimeError("a bug in the writer")

            monkeypatch.setattr(store, "_run_batch", broken)
            with pytest.raises(StoreError, match="writer thread failed"):
                await store.flush()
            await store.aclose()
            assert await other.start_attempt("r", 2, 0) == 1
        finally:
            await other.aclose()

    asyncio.run(main())
