"""A second signal exits at once (``Stopper._force``, ``os._exit``): on a terminal it
shows the cursor again first. The live view (rich) hides it while it draws and shows it
as it stops, which ``os._exit`` skips: the shell was left without a cursor."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.wait import GUARD_S

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and ttys")

SHOW_CURSOR = b"\x1b[?25h"

FORCE = """
import signal
from agentflow.demo._stop import Stopper
Stopper()._force(signal.SIGINT, None)
"""


def _force_with_stdout(stdout: int) -> int:
    child = subprocess.run(
        [sys.executable, "-c", FORCE],
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=GUARD_S,
        check=False,
    )
    assert b"SIGINT again: exiting without a report" in child.stderr
    return child.returncode


def test_a_forced_exit_shows_the_cursor_on_a_terminal() -> None:
    import pty

    master, slave = pty.openpty()
    try:
        assert _force_with_stdout(slave) == 130
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 1024)
            except OSError:  # (EIO: the terminal's other end is closed)
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    assert SHOW_CURSOR in out


def test_a_forced_exit_writes_nothing_to_a_pipe() -> None:
    child = subprocess.run(
        [sys.executable, "-c", FORCE], capture_output=True, timeout=GUARD_S, check=False
    )
    assert child.returncode == 130
    assert child.stdout == b""
