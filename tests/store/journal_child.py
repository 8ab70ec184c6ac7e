"""A child process for ``test_journal.py``: records into a SQLite store whose writer
never commits on its own (``batch_interval_s=10``), then is SIGKILLed — by itself, at a
known moment, so what it recorded is known exactly.

    python -m tests.store.journal_child fleet DB TURNS
        runs the store tests' fleet (run ``run-1``) and kills itself in the callback of
        its TURNS-th ``turn_end`` (a turn is recorded before that event).
    python -m tests.store.journal_child records DB N K [SEGMENT_BYTES]
        writes run ``r``'s start and N tool results, flushes after the first K (so the
        journal's first K records are committed and marked), then kills itself; with
        SEGMENT_BYTES, in segments of that size.
    python -m tests.store.journal_child spare DB
        claims a session (the writer makes the journal's first segment ahead), then kills
        itself before writing anything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from agentflow import Event, Fleet
from agentflow._trace import ToolCall
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import LeaseOwner, RunStarted, SQLiteStore, ToolFinished, _journal

from .fleets import agents, driver


def tool_result(i: int) -> ToolFinished:
    """The ``i``-th tool result of run ``r``."""
    return ToolFinished(
        run_id="r",
        session_id="s",
        turn=i,
        call=ToolCall(index=0, id=f"call-{i}", name="lookup", arguments='{"key": "k"}'),
        output=f"value {i} " * 20,
        is_error=False,
        duration_s=0.001 * i,
    )


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def fleet(db: Path, turns: int) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    ended = 0

    def count(event: Event) -> None:
        nonlocal ended
        if event.type == "turn_end":
            ended += 1
            if ended == turns:
                _die()

    members = agents()
    todo = [members[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(6)]
    fleet = Fleet(
        SimTransport(driver()), max_concurrency=4, clock=loop_clock, store=store, callbacks=[count]
    )
    await fleet.run(todo, run_id="run-1")
    print("finished before the kill", flush=True)


async def records(db: Path, n: int, k: int) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=1, config=None))
    for i in range(n):
        if i == k:
            await store.flush()
        store.write(tool_result(i))
    _die()


async def spare(db: Path) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    await store.claim("r", ["s"], LeaseOwner(), 60.0)
    _die()


if __name__ == "__main__":
    mode, path = sys.argv[1], Path(sys.argv[2])
    if mode == "spare":
        asyncio.run(spare(path))
    elif mode == "fleet":
        run_virtual(fleet(path, int(sys.argv[3])))
    else:
        if len(sys.argv) > 5:
            _journal.SEGMENT_BYTES = int(sys.argv[5])
        asyncio.run(records(path, int(sys.argv[3]), int(sys.argv[4])))
