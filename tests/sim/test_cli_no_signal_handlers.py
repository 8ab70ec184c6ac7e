"""``python -m agentflow.sim`` on an event loop without signal handlers (Windows').

``_serve`` called ``loop.add_signal_handler`` unguarded, so where the loop raises
``NotImplementedError`` the simulator died before serving; the worker and the demo
already allowed for it. It now serves, and Ctrl-C (asyncio's own SIGINT handling) ends
it. The loop's lack is simulated in a child process.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import aiohttp

from ..wait import GUARD_S
from .simproc import dies_with_parent

CODE = """
import asyncio.unix_events as ue, sys

def nope(self, *args, **kwargs):
    raise NotImplementedError

ue._UnixSelectorEventLoop.add_signal_handler = nope
from agentflow.sim.cli import main
sys.exit(main(["--port", "0", "--quiet"]))
"""


async def test_serves_and_ctrl_c_stops_it() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CODE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        **dies_with_parent(),  # killed with this process, however it ends
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), GUARD_S)).decode()
        m = re.search(r"serving cpu-tiny at (http://127\.0\.0\.1:\d+)/v1", line)
        assert m is not None, line + (await proc.stderr.read()).decode()
        async with aiohttp.ClientSession() as s, s.get(m.group(1) + "/health") as r:
            assert r.status == 200
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), GUARD_S) == 130
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
