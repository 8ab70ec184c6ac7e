"""A parent process for the start-up hang tests (``python -m tests.workers.start_hang_child
MODE SERVER MARKERS``): its two workers hang while they import this main module (as a
worker of a script with work at import time does), before they read their start
message, which is larger than the pipe's buffer — so the parent's send of it blocks.

``watchdog``: the heartbeat's start-up bound (shortened to 2 s) kills them. ``cancel``:
no heartbeat; once both workers hang (each writes a file in ``MARKERS`` first), the run
is cancelled. Either way it prints one JSON line — each session's status and error —
and exits; the test kills the process group should it hang."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

#: Set (by this process, for its workers) to the directory of the markers.
HANG = "AGENTFLOW_TEST_START_HANG"

if __name__ == "__mp_main__" and os.environ.get(HANG):
    (Path(os.environ[HANG]) / str(os.getpid())).write_text("hung")
    time.sleep(600)  # only a kill ends it

import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402

from agentflow import Fleet, HTTPTransport  # noqa: E402
from agentflow._workers import _watchdog  # noqa: E402
from tests.workers.tools import PLAIN  # noqa: E402

#: Metadata far larger than a pipe's buffer (a few hundred KB at most).
BLOB = "x" * 4_000_000


async def main(mode: str, server: str, markers: Path) -> None:
    _watchdog.START_TIMEOUT_S = 2.0
    os.environ[HANG] = str(markers)  # the spawned workers inherit it
    sessions = [PLAIN.session("q", session_id=f"s{i}", metadata={"blob": BLOB}) for i in range(2)]
    async with HTTPTransport(server) as http:
        if mode == "watchdog":
            result = await Fleet(http, workers=2, heartbeat_timeout_s=1.0).run(sessions)
            out: list[tuple[str | None, str]] = [(s.status, str(s.error)) for s in result.sessions]
        else:
            fleet = Fleet(http, workers=2, heartbeat_timeout_s=None, stop_timeout_s=1.0)
            task = asyncio.ensure_future(fleet.run(sessions))
            while len(os.listdir(markers)) < 2:  # noqa: ASYNC110 - other processes
                await asyncio.sleep(0.05)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            out = [(s.result.status if s.result else None, "") for s in sessions]
    print(json.dumps({"sessions": out, "workers": len(multiprocessing.active_children())}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
