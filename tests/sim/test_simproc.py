"""The simulators the tests start in child processes (tests/sim/simproc.py) never outlive
a test process that is killed: test_timing.py's fixture and test_cli.py started theirs
with a bare Popen, and a killed pytest (CI timeout, OOM, kill -9) left them serving."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..procutil import GUARD_S, alive, healthy, wait_for
from ..wait import read_line

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; PR_SET_PDEATHSIG")

ROOT = Path(__file__).resolve().parents[2]

#: A parent that starts a simulator as a test does, prints its pid and port, and waits.
PARENTS = {
    "sim_child": """
        import time
        from tests.sim.simproc import sim_child
        child, url = sim_child("--quiet")
        print(child.pid, url.rsplit(":", 1)[1], flush=True)
        time.sleep(600)
        """,
    "dies_with_parent": """
        import subprocess, sys, time
        from agentflow._process import free_port
        from tests.sim.simproc import SIM, dies_with_parent
        port = free_port()
        proc = subprocess.Popen([*SIM, "--port", str(port), "--quiet"],
                                stdout=subprocess.PIPE, **dies_with_parent())
        proc.stdout.readline()  # serving
        print(proc.pid, port, flush=True)
        time.sleep(600)
        """,
}


@pytest.mark.parametrize("how", sorted(PARENTS))
def test_a_test_simulator_dies_with_a_killed_test_process(how: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENTS[how])],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    pid = 0
    try:
        assert parent.stdout is not None
        line = read_line(parent.stdout, "the parent's ready line").split()
        assert len(line) == 2, parent.stderr.read() if parent.stderr else ""
        pid, port = int(line[0]), int(line[1])
        assert healthy(port)
        parent.kill()
        assert parent.wait(GUARD_S) == -signal.SIGKILL
        wait_for(lambda: not alive(pid), f"simulator {pid} to die with its parent")
    finally:
        if parent.returncode is None:
            parent.kill()
        if pid and alive(pid):  # the failure case: do not leave it serving (nor holding
            os.kill(pid, signal.SIGKILL)  # the parent's stderr open)
        parent.communicate(timeout=GUARD_S)
