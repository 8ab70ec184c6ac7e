"""The parent-kill test's child: ``workload(16)`` on ``Fleet(workers=2)`` recorded in a
SQLite store, against a simulator the test runs on loopback.

    python -m tests.workers.store_child BASE_URL DB RUN_ID

Prints its pid, then ``turn`` after every finished turn (flushed, so the test can kill it
at a chosen moment), and ``done`` at the end.
"""

from __future__ import annotations

import asyncio
import os
import sys

from agentflow import Event, Fleet, HTTPTransport
from agentflow.store import SQLiteStore
from tests.workers.tools import workload


def said(event: Event) -> None:
    """Tell the test that a turn ended."""
    if event.type == "turn_end":
        print("turn", flush=True)


async def main(base_url: str, db: str, run_id: str) -> None:
    """Run the workload to its end (unless killed first)."""
    print(os.getpid(), flush=True)
    store = SQLiteStore(db)
    try:
        async with HTTPTransport(base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, store=store, callbacks=[said])
            await fleet.run(workload(16), run_id=run_id)
    finally:
        await store.aclose()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
