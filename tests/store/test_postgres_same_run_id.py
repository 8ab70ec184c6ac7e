"""Two workers starting ``Fleet.run`` with one run id on one PostgreSQL database: one
runs it, the other is refused (``ConfigError``) before it runs anything. ``Fleet.run``
checked the id with a load and wrote the run's row later, so both passed the check;
the second then claimed the sessions the first had given back (or ran those it could not
claim regardless) and every tool ran twice. The run's row is now made, or found taken,
in one statement (``PostgresStore.create_run``). A store that never claimed a session no
longer writes into one another worker holds (its turns and tool results are fenced)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import psycopg
import pytest

from agentflow import Agent, ConfigError, Fleet, StoreError
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import LeaseOwner, PostgresStore, StoredRun

from ..wait import GUARD_S
from .fleets import driver
from .journal_child import tool_result

ran: Counter[str] = Counter()


def _agent(worker: str) -> Agent:
    def lookup(key: str = "") -> str:
        """Look a key up.

        Args:
            key: what to look up.
        """
        ran[worker] += 1
        return f"from {worker}"

    return Agent(name="a", model="sim", tools=[lookup], params={"max_tokens": 16}, max_turns=8)


class HeldAfterLoad(PostgresStore):
    """A store whose first ``load`` (``Fleet.run``'s check that the run id is new) waits,
    once it has answered, until ``go`` is set: another worker starts the run meanwhile."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.loaded = asyncio.Event()
        self.go = asyncio.Event()

    async def load(self, run_id: str, sessions: Sequence[str] | None = None) -> StoredRun:
        try:
            return await super().load(run_id, sessions)
        finally:
            if not self.loaded.is_set():
                self.loaded.set()
                await self.go.wait()


async def _run(store: PostgresStore, worker: str) -> Counter[str]:
    transport = SimTransport(driver())
    agent = _agent(worker)
    try:
        fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=store)
        result = await fleet.run(
            [agent.session(f"task {i}", session_id=f"s{i}") for i in range(4)], run_id="job-1"
        )
        return Counter(s.status for s in result.sessions)
    finally:
        await store.aclose()
        await transport.aclose()


def test_the_second_of_two_runs_of_one_id_that_both_passed_the_check_runs_nothing(
    postgres_db: str,
) -> None:
    ran.clear()

    async def main() -> None:
        late = HeldAfterLoad(postgres_db)
        second = asyncio.ensure_future(_run(late, "B"))
        await asyncio.wait_for(late.loaded.wait(), GUARD_S)  # B found no such run
        assert await _run(PostgresStore(postgres_db), "A") == {"completed": 4}
        late.go.set()
        with pytest.raises(ConfigError, match="run_id 'job-1' is already in PostgresStore"):
            await asyncio.wait_for(second, GUARD_S)

    run_virtual(main())
    assert ran["B"] == 0 and ran["A"] > 0
    with psycopg.connect(postgres_db) as conn:
        assert conn.execute("SELECT count(*) FROM agentflow.conflicts").fetchone() == (0,)
        outputs = {r[0] for r in conn.execute("SELECT output FROM agentflow.tool_calls")}
        attempts = conn.execute("SELECT count(*) FROM agentflow.run_attempts").fetchone()
    assert outputs == {"from A"} and attempts == (1,)


def test_create_run_refuses_a_taken_run_id_and_writes_nothing(postgres_db: str) -> None:
    async def main() -> None:
        from agentflow.store import RunStarted

        first, second = PostgresStore(postgres_db), PostgresStore(postgres_db)
        start = RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=2, sessions=0)
        await first.create_run(start)
        with pytest.raises(ConfigError, match="run_id 'r' is already in"):
            await second.create_run(start)
        assert await second.conflicts("r") == []
        assert [a.attempt for a in (await second.load("r")).attempts] == [0]
        await first.aclose()
        await second.aclose()

    asyncio.run(main())


def test_a_store_holding_no_lease_of_a_session_does_not_write_into_it_while_another_does(
    postgres_db: str,
) -> None:
    async def main() -> None:
        holder, other = PostgresStore(postgres_db), PostgresStore(postgres_db)
        await holder.open()
        with psycopg.connect(postgres_db, autocommit=True) as conn:
            conn.execute("INSERT INTO agentflow.runs VALUES ('r', 1, 'running', 1, NULL)")
            conn.execute(
                "INSERT INTO agentflow.sessions (run_id, session_id, position, agent,"
                " fingerprint, task, metadata, status) VALUES"
                " ('r', 's', 0, 'a', 'f', '[]', '{}', 'pending')"
            )
        owner = LeaseOwner()
        assert await holder.claim("r", ["s"], owner, 60) == ["s"]
        other.write(tool_result(1))  # never claimed: fenced while the holder's lease lives
        await other.flush()
        assert await other.conflicts("r") == ["fenced tool_call s/call-1"]
        await holder.release("r", owner)
        other.write(tool_result(2))  # nobody holds it now: written
        holder.write(tool_result(3))  # (released: no longer the holder's either)
        await other.flush()
        await holder.flush()
        await holder.aclose()
        await other.aclose()

    asyncio.run(main())
    with psycopg.connect(postgres_db) as conn:
        ids = [r[0] for r in conn.execute("SELECT call_id FROM agentflow.tool_calls ORDER BY 1")]
    assert ids == ["call-2", "call-3"]


def test_a_fresh_run_that_cannot_claim_every_session_runs_none(postgres_db: str) -> None:
    """Through a store without ``create_run`` (another backend), two runs of one id may
    still both pass the check: the second, which cannot claim the sessions the first
    holds, now runs none of them (it ran them all regardless)."""
    ran.clear()

    class NoCreateRun(HeldAfterLoad):
        create_run = None  # type: ignore[assignment]

    async def main() -> None:
        late = NoCreateRun(postgres_db)
        first = PostgresStore(postgres_db)
        second = asyncio.ensure_future(_run(late, "B"))
        await asyncio.wait_for(late.loaded.wait(), GUARD_S)
        # A runs until its first tool call, holding every session's lease meanwhile.
        gate = asyncio.Event()
        release = asyncio.Event()

        async def blocking(key: str = "") -> str:
            """Look a key up.

            Args:
                key: what to look up.
            """
            gate.set()
            await release.wait()
            return "from A"

        agent = Agent(name="a", model="sim", tools=[blocking], params={"max_tokens": 16})
        transport = SimTransport(driver())
        fleet = Fleet(transport, max_concurrency=4, clock=loop_clock, store=first)
        running = asyncio.ensure_future(
            fleet.run(
                [agent.session(f"task {i}", session_id=f"s{i}") for i in range(4)],
                run_id="job-1",
            )
        )
        await asyncio.wait_for(gate.wait(), GUARD_S)
        late.go.set()
        with pytest.raises(StoreError, match=r"4 of its 4 sessions are held by another worker"):
            await asyncio.wait_for(second, GUARD_S)
        release.set()
        result = await asyncio.wait_for(running, GUARD_S)
        assert {s.status for s in result.sessions} == {"completed"}
        await first.aclose()
        await transport.aclose()

    run_virtual(main())
    assert ran["B"] == 0
