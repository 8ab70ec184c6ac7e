"""A parent process for the worker tests: runs ``Fleet(workers=2)`` against the server
at ``argv[1]`` and prints its workers' pids once the first turn has ended, then keeps
going until it is killed (the test kills it)."""

from __future__ import annotations

import asyncio
import multiprocessing
import sys

from agentflow import Event, Fleet, HTTPTransport
from tests.workers.tools import workload


def main() -> None:
    printed = False

    def on_turn(event: Event) -> None:
        nonlocal printed
        if event.type == "turn_end" and not printed:
            printed = True
            pids = sorted(p.pid for p in multiprocessing.active_children() if p.pid)
            print(" ".join(map(str, pids)), flush=True)

    async def run() -> None:
        async with HTTPTransport(sys.argv[1]) as http:
            fleet = Fleet(http, max_concurrency=1, workers=2, callbacks=[on_turn])
            await fleet.run(workload(400))

    asyncio.run(run())


if __name__ == "__main__":
    main()
