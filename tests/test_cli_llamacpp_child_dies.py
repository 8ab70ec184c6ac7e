"""A llama.cpp server that dies under ``agentflow llamacpp`` (a crash, an OOM kill) ends
the command with status 1 and the server's last output on stderr: it used to sleep on,
serving nothing, with a zombie child, and exit 0 at the next SIGTERM.

Real processes throughout; every process a test starts is killed on its way out.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from agentflow._process import ChildServer, free_port

from .procutil import GUARD_S, alive, healthy, one_child, serving_llamacpp
from .test_child_process import health_server

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def test_wait_returns_when_the_child_is_killed_from_outside(tmp_path: Path) -> None:
    script = health_server(tmp_path / "server.py", "signal.SIG_DFL")
    greet = tmp_path / "greet.py"  # prints a line, then serves /health
    greet.write_text(f"print('hello from the child', flush=True)\n{script.read_text()}")
    port = free_port()
    child = ChildServer([sys.executable, str(greet), str(port)], port=port, name="toy server")
    child.start()
    try:
        pid = child.pid
        assert pid is not None and healthy(port)
        running = child.returncode
        assert running is None
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would
        code, after = child.wait(GUARD_S), child.returncode
        assert code == after == -signal.SIGKILL
        assert "hello from the child" in child.log_tail()
    finally:
        child.kill()
    assert not alive(pid)


def test_wait_on_a_child_not_started_is_none() -> None:
    child = ChildServer(["true"], port=free_port(), name="toy server")
    assert child.wait(0) is None and child.returncode is None


@pytest.mark.llamacpp
def test_the_command_exits_1_when_its_server_is_killed() -> None:
    proc, line = serving_llamacpp("--n-parallel", "1", "--threads", "1")
    try:
        assert "llama.cpp serving" in line, line
        server = one_child(proc.pid)
        os.kill(server, signal.SIGKILL)
        _, err = proc.communicate(timeout=GUARD_S)  # a hang guard: it used to sleep forever
    finally:
        if proc.poll() is None:  # the server dies with it (PR_SET_PDEATHSIG)
            proc.kill()
            proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 1, err
    assert "llama.cpp server exited (code -9): killed by SIGKILL" in err, err
    assert not alive(server)
