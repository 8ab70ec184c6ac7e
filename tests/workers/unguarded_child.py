"""A parent process whose main module has no ``if __name__ == "__main__":`` guard
(``python -m tests.workers.unguarded_child SERVER``): each spawned worker imports it, runs
the fleet again there, and exits with ``multiprocessing``'s bootstrapping RuntimeError
before it reads its sessions. The parent prints one JSON line: each session's status
and error."""

from __future__ import annotations

import asyncio
import json
import sys

from agentflow import Fleet, HTTPTransport
from tests.workers.tools import PLAIN


async def main(server: str) -> None:
    sessions = [PLAIN.session("q", session_id=f"s{i}") for i in range(2)]
    async with HTTPTransport(server) as http:
        result = await Fleet(http, workers=2, heartbeat_timeout_s=None).run(sessions)
    print(json.dumps([(s.status, str(s.error)) for s in result.sessions]))


asyncio.run(main(sys.argv[1]))  # unguarded on purpose: a worker runs this too
