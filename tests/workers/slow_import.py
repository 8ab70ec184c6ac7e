"""A tool module that hangs when a worker process imports it (to unpickle its sessions)
while :data:`HANG_IMPORT` is set: a worker stuck in its start-up. The test process (no
multiprocessing parent) imports it at once."""

from __future__ import annotations

import multiprocessing
import os
import time

from agentflow import Agent

#: Set (by the test, so its workers inherit it) to make a worker's import hang.
HANG_IMPORT = "AGENTFLOW_TEST_HANG_IMPORT"

if os.environ.get(HANG_IMPORT) and multiprocessing.parent_process() is not None:
    time.sleep(600)  # in a worker: hang while loading; only the start-up bound ends it


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
