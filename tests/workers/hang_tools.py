"""A tool that blocks its worker's event loop (for the heartbeat tests): module-level, so
a worker process can import it."""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType

from agentflow import Agent, Session
from tests.workers.tools import PLAIN

#: With this environment variable set to a path, :func:`stall` blocks only while no file
#: is there (it creates it first): the first call hangs, a later one (on a new worker)
#: returns. Without it, every call hangs.
ONCE = "AGENTFLOW_TEST_STALL_ONCE"


def _block() -> None:
    """Block the calling thread for 600 s (with :data:`ONCE` set: the first time only)."""
    marker = os.environ.get(ONCE)
    if marker is not None and os.path.exists(marker):
        return
    if marker is not None:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
    time.sleep(600)  # only the parent's heartbeat watchdog ends this


async def stall(key: str) -> str:
    """Look a key up — after a sync call that blocks the event loop (as a sync call in
    an async tool does by mistake)."""
    _block()
    return f"value of {key}"


HANG = Agent(
    name="hang", model="m", instructions="Use the tool.", tools=[stall], params={"max_tokens": 32}
)


def hang_workload(n: int) -> list[Session]:
    """``n`` sessions dealt round-robin to two workers: the even ones (worker 0) answer at
    once, the odd ones (worker 1) call :func:`stall` first."""
    agents = (PLAIN, HANG)
    return [agents[i % 2].session(f"question {i}", session_id=f"s{i}") for i in range(n)]


def deaf_worker(conn: Connection, heard: EventType) -> None:
    """A worker process that takes the parent's ``("exit",)``, says so (``heard``), and
    does not exit: only a kill ends it."""
    conn.recv()
    heard.set()
    time.sleep(600)
