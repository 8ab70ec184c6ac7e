"""A child process for ``test_journal_review.py``: records into a SQLite store whose
writer never commits on its own (``batch_interval_s=10``), then SIGKILLs itself.

    python -m tests.store.journal_review_child metadata DB REPR
        writes run ``r``'s start and one session whose metadata is ``eval(REPR)``.
    python -m tests.store.journal_review_child fork DB
        writes run ``r``'s start and 3 tool results, forks a child that sleeps until
        its stdin closes (as a ``multiprocessing`` fork worker would live on), prints
        the child's pid, then kills itself.
    python -m tests.store.journal_review_child overflow DB
        writes run ``r``'s start and tool results 0-2, the second one's truncated_chars
        2**63 (MessagePack takes it, SQLite cannot bind it), then kills itself.
    python -m tests.store.journal_review_child forkwrite DB
        writes run ``r``'s start and tool results 0-2, forks a child that writes tool
        results 5-7 (the same sizes) and exits, writes tool results 3-4, then kills
        itself: only what it wrote itself is its journal.
"""

from __future__ import annotations

import asyncio
import datetime  # noqa: F401 (for eval)
import os
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec

from agentflow.store import RunStarted, SessionStarted, SQLiteStore
from agentflow.store._records import AgentInfo

from .journal_child import tool_result


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def session(metadata: dict[Any, Any]) -> SessionStarted:
    agent = AgentInfo(name="a", fingerprint="f", instructions="be brief", config={})
    return SessionStarted(
        run_id="r", session_id="s", position=0, agent=agent, task=[], metadata=metadata
    )


def start() -> RunStarted:
    return RunStarted(run_id="r", attempt=0, wall_ns=1, clock_ns=0, sessions=1, config=None)


async def metadata(db: Path, value: str) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    store.write(start())
    store.write(session(eval(value)))
    _die()


async def fork(db: Path) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    store.write(start())
    for i in range(3):
        store.write(tool_result(i))
    # Something in the child still referring to a segment (a frame another thread left,
    # here a list) must not keep it locked: its mapping's own descriptor shares the lock.
    held = list(store._journal._segments) if store._journal is not None else []
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked child: lives on after its parent's kill
        try:
            assert held
            # Here the fork's hooks have run (they let go of the segments): say so, or
            # a loaded machine lets the test open the store before they have.
            os.write(ready_w, b"x")
            sys.stdin.read()
        finally:
            os._exit(0)
    os.read(ready_r, 1)
    print(pid, flush=True)
    _die()


async def forkwrite(db: Path) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    store.write(start())
    for i in range(3):
        store.write(tool_result(i))
    pid = os.fork()
    if pid == 0:  # the forked child records too (its store has no writer thread)
        try:
            for i in range(5, 8):
                store.write(tool_result(i))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)  # noqa: ASYNC222 (nothing else runs: the order matters)
    for i in range(3, 5):
        store.write(tool_result(i))
    _die()


async def overflow(db: Path) -> None:
    store = SQLiteStore(db, batch_interval_s=10)
    await store.open()
    store.write(start())
    for i in range(3):
        r = tool_result(i)
        store.write(r if i != 1 else msgspec.structs.replace(r, truncated_chars=2**63))
    _die()


if __name__ == "__main__":
    mode, path = sys.argv[1], Path(sys.argv[2])
    if mode == "metadata":
        asyncio.run(metadata(path, sys.argv[3]))
    elif mode == "forkwrite":
        asyncio.run(forkwrite(path))
    elif mode == "overflow":
        asyncio.run(overflow(path))
    else:
        asyncio.run(fork(path))
