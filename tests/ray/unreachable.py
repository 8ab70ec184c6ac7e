"""A Ray driver for the Ray tests: with ``RAY_ADDRESS`` naming no cluster, runs
``Fleet(workers=2, backend="ray")`` with the address's probe bounded to ``argv[1]``
seconds, and prints what the run raised and how often a task of the same loop ran
meanwhile; then exits."""

from __future__ import annotations

import asyncio
import sys

import agentflow._workers._ray as ray_backend
from agentflow import Fleet, HTTPTransport
from tests.workers.tools import workload


async def run() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    async with HTTPTransport("http://127.0.0.1:9") as http:
        try:
            await Fleet(http, workers=2, backend="ray").run(workload(2))
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}", flush=True)
    ticker.cancel()
    print(f"ticks {ticks}", flush=True)


if __name__ == "__main__":
    ray_backend._INIT_TIMEOUT_S = float(sys.argv[1])
    asyncio.run(run())
