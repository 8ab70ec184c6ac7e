"""A Ray driver for the Ray tests: connects to the running Ray at ``argv[2]``, runs
``Fleet(workers=2, backend="ray")`` against the server at ``argv[1]`` and prints its
actors' names once the first turn has ended, then keeps going until it is killed (the
test kills it)."""

from __future__ import annotations

import asyncio
import sys

import ray

from agentflow import Event, Fleet, HTTPTransport
from tests.workers.tools import workload


def main() -> None:
    ray.init(address=sys.argv[2], log_to_driver=False, configure_logging=False)
    printed = False

    def on_turn(event: Event) -> None:
        nonlocal printed
        if event.type == "turn_end" and not printed:
            printed = True
            names = sorted(
                a["name"]
                for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith("agentflow-")
            )
            print(" ".join(names), flush=True)

    async def run() -> None:
        async with HTTPTransport(sys.argv[1]) as http:
            fleet = Fleet(http, max_concurrency=1, workers=2, backend="ray", callbacks=[on_turn])
            await fleet.run(workload(400))

    asyncio.run(run())


if __name__ == "__main__":
    main()
