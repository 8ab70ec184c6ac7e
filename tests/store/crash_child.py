"""The crash test's child: a fleet of tool-calling sessions on the in-process simulator
(virtual time) recorded in a store; run fresh, or resumed when the run is already there.

    python -m tests.store.crash_child DB SIDE_FILE GENERATION SESSIONS [LEASE_TTL_S]

DB is a SQLite file, or a PostgreSQL DSN (``postgresql://…``): then several children
may resume the run at once, sharing it (``LEASE_TTL_S``: ``Fleet(lease_ttl_s=)``).

Prints ``turn`` after every finished turn (flushed, so the parent can count them and
kill at a chosen moment) and ``done`` at the end. Every tool execution appends
``GENERATION session turn arguments`` to SIDE_FILE before returning, so the parent can
count how often each call ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import structlog

from agentflow import Agent, Event, Fleet, RunNotFound, Tool
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.store import PostgresStore, SQLiteStore

RUN_ID = "crash"


def make_agents(side_file: str, generation: int) -> list[Agent]:
    """Four agents with one deterministic tool that logs each execution."""

    def lookup(key: str, count: int = 1) -> str:
        """Look a key up.

        Args:
            key: what to look up.
            count: how many values.
        """
        ctx = structlog.contextvars.get_contextvars()
        line = json.dumps([generation, ctx.get("session"), ctx.get("turn"), key, count])
        fd = os.open(side_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        return f"{count} value(s) of {key!r}"

    return [
        Agent(
            name=f"agent-{i}",
            model="sim",
            instructions=f"Agent {i} looks things up. " * 8,
            tools=[Tool.from_function(lookup, in_thread=False)],
            params={"max_tokens": 96, "agentflow_tool_rounds": 2 + i % 3},
            max_turns=8,
        )
        for i in range(4)
    ]


async def main(db: str, side_file: str, generation: int, n: int, ttl_s: float = 60.0) -> None:
    """Run (or resume) the fleet."""
    engine = Engine(
        "deepseek-v4.1-flash-gb300",
        seed=5,
        textgen=TextGenConfig(answer_tokens=(4, 12), tool_calls_per_turn=(1, 3)),
    )
    transport = SimTransport(EngineDriver(engine))
    store = PostgresStore(db) if db.startswith("postgresql://") else SQLiteStore(db)
    team = make_agents(side_file, generation)

    def show(event: Event) -> None:
        if event.type == "turn_end":
            sys.stdout.write("turn\n")
            sys.stdout.flush()

    fleet = Fleet(
        transport,
        max_concurrency=16,
        clock=loop_clock,
        store=store,
        callbacks=[show],
        lease_ttl_s=ttl_s,
    )
    try:
        try:
            await store.load(RUN_ID, sessions=())  # is it there? (no sessions read)
        except RunNotFound:
            sessions = [team[i % 4].session(f"task {i}", session_id=f"s{i:03d}") for i in range(n)]
            result = await fleet.run(sessions, run_id=RUN_ID)
        else:
            result = await fleet.resume(RUN_ID, agents=team)
        bad = [s.session_id for s in result.sessions if not s.ok]
        print("done" if not bad else f"failed {bad}", flush=True)
    finally:
        await store.aclose()
        await transport.aclose()


if __name__ == "__main__":
    db, side, gen, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ttl = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    run_virtual(main(db, side, gen, n, ttl))
    asyncio.set_event_loop(None)
