"""The simulator in a child process for a test (``python -m agentflow.sim``), started so
that it never outlives the test process — not even one killed with SIGKILL, by a CI
timeout or the OOM killer: the kernel then kills it too (``PR_SET_PDEATHSIG``, as
:class:`~agentflow._process.ChildServer` arms it on Linux)."""

from __future__ import annotations

import signal
import sys
from typing import Any

from agentflow._process import ChildServer, _pdeathsig, free_port

from ..wait import GUARD_S

#: ``python -m agentflow.sim``.
SIM = [sys.executable, "-m", "agentflow.sim"]


def sim_child(*args: str) -> tuple[ChildServer, str]:
    """A started simulator with ``args`` on a free port, and its URL (``http://host:port``).

    Stop it with :meth:`ChildServer.stop`.
    """
    port = free_port()
    child = ChildServer(
        [*SIM, "--port", str(port), *args],
        port=port,
        name="agentflow sim",
        startup_timeout_s=GUARD_S,
    )
    child.start()
    return child, f"http://127.0.0.1:{port}"


def dies_with_parent() -> dict[str, Any]:
    """Keyword arguments for ``subprocess.Popen`` / ``asyncio.create_subprocess_exec`` of
    a test that needs the process itself (its output, its exit status): the kernel kills
    the child when this process dies (Linux, from the main thread; else nothing)."""
    return {"preexec_fn": _pdeathsig(signal.SIGKILL)}
