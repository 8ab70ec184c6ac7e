"""Two workers resuming one run at once on PostgreSQL: a session that ended ``error`` is
run again by one of them; failing again at the same turn, it is returned as stored by the
other — not run a third time, its tools with it (``docs/store.md``, *Leases*: one that
ended ``error`` elsewhere during this attempt is returned as stored). The second worker
took the session's unchanged status and turn count for its own start's, and ran it once
more; the store now stamps a session's end with the run's latest attempt
(``sessions.ended_attempt``), which a worker's re-run moves on."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest

from agentflow import Agent, Fleet
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import PostgresStore, StoredRun
from agentflow.store._protocol import LeaseOwner

from ..wait import GUARD_S
from .fleets import driver


class _Overlap:
    """The moment both workers' resumes overlap: each has loaded the run (``loaded``: the
    re-run may end before the other is numbered — on the simulator and virtual time it
    mostly does), or each is numbered too (``numbered``: it ends after, as when the re-run
    waits for a model's reply). Claims wait for it, so neither resume is over before the
    other starts (then the second would rightly run the session again)."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.seen: dict[str, int] = {"loaded": 0, "numbered": 0}
        self.reached = asyncio.Event()

    def step(self, what: str) -> None:
        self.seen[what] += 1
        if self.seen[self.point] == 2:
            self.reached.set()


class _Worker(PostgresStore):
    def __init__(self, dsn: str, overlap: _Overlap | None) -> None:
        super().__init__(dsn)
        self.overlap = overlap

    async def load(self, run_id: str, sessions: Sequence[str] | None = None) -> StoredRun:
        run = await super().load(run_id, sessions)
        if self.overlap is not None and sessions is None:
            self.overlap.step("loaded")
        return run

    async def start_attempt(self, run_id: str, wall_ns: int, clock_ns: int) -> int:
        attempt = await super().start_attempt(run_id, wall_ns, clock_ns)
        if self.overlap is not None:
            self.overlap.step("numbered")
        return attempt

    async def claim(
        self, run_id: str, session_ids: Sequence[str], owner: LeaseOwner, ttl_s: float
    ) -> list[str]:
        if self.overlap is not None:
            await asyncio.wait_for(self.overlap.reached.wait(), GUARD_S)
        return await super().claim(run_id, session_ids, owner, ttl_s)


@pytest.mark.parametrize("before_the_column", [False, True])
@pytest.mark.parametrize("overlap", ["loaded", "numbered"])
def test_a_session_that_failed_again_elsewhere_is_not_run_a_third_time(
    postgres_db: str, overlap: str, before_the_column: bool
) -> None:
    """``before_the_column``: the session ended before the store had
    ``sessions.ended_attempt`` (its row's is NULL); a load gave ``None`` for it, as for a
    store without the column, and the stamps were not compared."""
    runs: list[str] = []

    def boom(key: str) -> str:
        """Change something outside, then fail.

        Args:
            key: what to change.
        """
        runs.append(key)
        raise RuntimeError("the outside system refused")

    def agent() -> Agent:
        return Agent(
            name="a", model="sim", instructions="You change things.", tools=[boom],
            params={"max_tokens": 32}, max_turns=4, tool_errors="raise",
        )  # fmt: skip

    async def first() -> str:
        store, transport = PostgresStore(postgres_db), SimTransport(driver())
        try:
            fleet = Fleet(transport, clock=loop_clock, store=store)
            result = await fleet.run([agent().session("task", session_id="s00")], run_id="r")
            return result.sessions[0].status
        finally:
            await store.aclose()
            await transport.aclose()

    async def worker(at: _Overlap | None) -> tuple[str, int]:
        store, transport = _Worker(postgres_db, at), SimTransport(driver())
        try:
            fleet = Fleet(transport, clock=loop_clock, store=store, lease_ttl_s=1.0)
            result = await fleet.resume("r", agents=[agent()])
            return result.sessions[0].status, len(result.sessions[0].turns)
        finally:
            await store.aclose()
            await transport.aclose()

    async def two_workers() -> list[tuple[str, int]]:
        at = _Overlap(overlap)
        return list(await asyncio.gather(worker(at), worker(at)))

    assert run_virtual(first()) == "error"
    assert len(runs) == 1
    if before_the_column:
        with psycopg.connect(postgres_db, autocommit=True) as admin:
            admin.execute("UPDATE agentflow.sessions SET ended_attempt = NULL")
    results = run_virtual(two_workers())
    assert len(runs) == 2  # once in the run, once in one of the workers (was 3)
    assert results[0] == results[1]
    assert results[0][0] == "error"
    # A later resume, alone, runs it again: that end was stamped before it started.
    assert run_virtual(worker(None)) == results[0]
    assert len(runs) == 3
