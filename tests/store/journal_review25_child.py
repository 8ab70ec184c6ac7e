"""A child process for ``test_journal_review25.py``: records into a SQLite store whose
writer never commits on its own (``batch_interval_s=10``), then SIGKILLs itself.

    python -m tests.store.journal_review25_child agents DB SEGMENT_BYTES
        writes run ``r``'s start and sessions s0-s1 of agents ``a`` and ``b`` (one
        ``AgentInfo`` object each, as the ``Recorder`` makes), flushes (their agents'
        frames are then before the marker), writes sessions s2-s9 of the same agents
        with 40 tool results after each (segments of SEGMENT_BYTES rotate between
        them), flushes after s5, then kills itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from agentflow.store import AgentInfo, RunStarted, SessionStarted, SQLiteStore, _journal

from .journal_child import tool_result

PROMPTS = {"a": "Agent a reviews code. " * 700, "b": "Agent b writes tests. " * 900}


def session(i: int, agent: AgentInfo) -> SessionStarted:
    return SessionStarted(
        run_id="r",
        session_id=f"s{i}",
        position=i,
        agent=agent,
        task=[{"role": "user", "content": f"task {i}"}],
        metadata={"i": i},
    )


async def agents(db: Path) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    infos = [
        AgentInfo(name=n, fingerprint=f"fp-{n}", instructions=p, config={"n": n})
        for n, p in PROMPTS.items()
    ]
    store.write(RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=10))
    store.write(session(0, infos[0]))
    store.write(session(1, infos[1]))
    await store.flush()
    for i in range(2, 10):
        store.write(session(i, infos[i % 2]))
        for k in range(40):
            store.write(tool_result(100 * i + k))
        if i == 5:
            await store.flush()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    mode, path = sys.argv[1], Path(sys.argv[2])
    assert mode == "agents"
    _journal.SEGMENT_BYTES = int(sys.argv[3])
    asyncio.run(agents(path))
