"""`agentflow llamacpp`: SIGTERM stops its llama.cpp child; ``kill -9`` leaves none either."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.procutil import GUARD_S, alive, healthy, listening, one_child, wait_for
from tests.wait import read_line

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; PR_SET_PDEATHSIG"),
]


@pytest.fixture
def serving() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """`agentflow llamacpp --port 0`, serving: the process, its child's pid, the port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", "llamacpp", "--port", "0", "--n-ctx", "2048"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = read_line(proc.stdout, "the serving line")  # printed once /health answers
        assert "serving" in line, line + proc.stdout.read()
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        yield proc, one_child(proc.pid), port
    finally:
        if proc.returncode is None:
            proc.kill()
        proc.communicate(timeout=GUARD_S)


def child_gone(pid: int, port: int) -> None:
    wait_for(lambda: not alive(pid), f"llama.cpp child {pid} to exit")
    wait_for(lambda: not listening(port), f"port {port} to close")


def test_sigterm_stops_the_llamacpp_child(serving: tuple[subprocess.Popen[str], int, int]) -> None:
    proc, child, port = serving
    wait_for(lambda: healthy(port), "/health to answer")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(GUARD_S * 2) == 0  # SIGTERM is how a server is told to stop
    child_gone(child, port)


def test_kill_9_leaves_no_llamacpp_child(serving: tuple[subprocess.Popen[str], int, int]) -> None:
    proc, child, port = serving
    proc.kill()
    assert proc.wait(GUARD_S) == -signal.SIGKILL
    child_gone(child, port)
