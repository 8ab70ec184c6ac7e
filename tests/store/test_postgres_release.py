"""``Fleet.run`` gives a session's PostgreSQL lease back as soon as the session ends, not
when the whole run ends: a second worker sharing the run can take the sessions that
ended while the first is still running others (before, every lease stayed held until
the run's end, so a worker resuming it waited for the slowest session)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentflow import Agent, Event, Fleet, FleetResult
from agentflow.embedded import SimTransport, loop_clock
from agentflow.store import LeaseOwner, PostgresStore
from agentflow.testing import PostgresServer

from .fleets import agents, driver

GUARD_S = 60.0
QUICK = 6


async def _claim_until(
    store: PostgresStore, ids: list[str], owner: LeaseOwner, want: set[str]
) -> list[str]:
    """Claim ``ids`` until ``want`` are among them (or the guard runs out)."""
    deadline = asyncio.get_running_loop().time() + GUARD_S
    got: list[str] = []
    while asyncio.get_running_loop().time() < deadline:
        got = await store.claim("run-1", ids, owner, 30.0)
        if want <= set(got):
            break
        await asyncio.sleep(0.05)
    return got


def test_a_finished_sessions_lease_is_free_while_the_run_goes_on(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database("release_early")
    gate = asyncio.Event()
    calls: list[str] = []

    async def hold(key: str, count: int = 1) -> str:
        """Look a key up, slowly.

        Args:
            key: what to look up.
            count: how many values.
        """
        calls.append(key)
        await gate.wait()
        return f"{count} value(s) of {key!r}"

    quick = agents(1)[0]
    slow = Agent(
        name="slow",
        model="sim",
        instructions=quick.instructions,
        tools=[hold],
        params={"max_tokens": 32},
        max_turns=8,
    )
    sessions = [quick.session(f"task {i}", session_id=f"q{i}") for i in range(QUICK)]
    sessions.append(slow.session("task slow", session_id="slow"))
    quick_ids = {f"q{i}" for i in range(QUICK)}

    async def main() -> tuple[list[str], list[str], FleetResult, list[str]]:
        ended: set[str] = set()
        all_quick_ended = asyncio.Event()

        def on_event(event: Event) -> None:
            if event.type == "session_end":
                e: Any = event
                ended.add(e.session_id)
                if quick_ids <= ended:
                    all_quick_ended.set()

        a_store, b_store = PostgresStore(dsn), PostgresStore(dsn)
        transport = SimTransport(driver())
        fleet = Fleet(
            transport, max_concurrency=8, clock=loop_clock, store=a_store, callbacks=[on_event]
        )
        worker_b = LeaseOwner()
        try:
            run = asyncio.ensure_future(fleet.run(sessions, run_id="run-1"))
            await asyncio.wait_for(all_quick_ended.wait(), GUARD_S)
            assert not run.done() and "slow" not in ended  # the slow one holds on in a tool
            await b_store.open()
            every = [*sorted(quick_ids), "slow"]
            # Worker B takes the ended sessions' leases while worker A still runs…
            got = await _claim_until(b_store, every, worker_b, quick_ids)
            # …but not the running session's: A still holds it.
            again = await b_store.claim("run-1", ["slow"], worker_b, 30.0)
            await b_store.release("run-1", worker_b)
            gate.set()
            result = await asyncio.wait_for(run, GUARD_S)
            conflicts = await b_store.conflicts("run-1")
        finally:
            gate.set()
            await a_store.aclose()
            await b_store.aclose()
            await transport.aclose()
        return got, again, result, conflicts

    got, again, result, conflicts = asyncio.run(main())
    assert set(got) == quick_ids
    assert again == []
    assert calls  # the slow session was held in its tool while B claimed
    assert [s.status for s in result.sessions] == ["completed"] * (QUICK + 1)
    assert conflicts == []
