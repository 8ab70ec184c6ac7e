"""A tool module that hangs when a worker process imports it (to unpickle its sessions):
a worker stuck in its start-up. The test process imports it at once."""

from __future__ import annotations

import multiprocessing
import time

from agentflow import Agent

if multiprocessing.parent_process() is not None:  # in a worker: hang while loading
    time.sleep(600)


def lookup_slowly(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


SLOW = Agent(
    name="slow",
    model="m",
    instructions="Use the tool.",
    tools=[lookup_slowly],
    params={"max_tokens": 32},
)
