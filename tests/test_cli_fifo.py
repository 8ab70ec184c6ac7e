"""An output path that is a FIFO with no reader (``mkfifo out; agentflow bench --report
out`` with nothing reading yet): the commands used to block for ever opening it, before
any work; it is now one line naming the flag, exit 2. A FIFO that has its reader passes.

The commands run as child processes, each under a hang guard (killed if it fires).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow._cliargs import check_output_file

from .test_cli_errors import assert_one_line
from .wait import GUARD_S

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs")


def agentflow(*argv: str) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", *argv],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=GUARD_S)  # a hang guard: it used to block for ever
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=GUARD_S)
    return proc.returncode, err


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["demo", "--virtual", "--agents", "2", "--turns", "1:1", "--no-live"], "--report"),
        (["bench", "--profile", "cpu-tiny", "--rate", "4"], "--report"),
        (["report", "nowhere.json"], "--html"),
    ],
)
def test_a_fifo_without_a_reader_is_refused(command: list[str], flag: str, tmp_path: Path) -> None:
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    code, err = agentflow(*command, flag, str(fifo))
    assert code == 2, err
    assert_one_line(err, f"agentflow {command[0]}", f"{flag} {fifo}", "FIFO with no reader")


def test_a_fifo_with_a_reader_passes_the_check(tmp_path: Path) -> None:
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        check_output_file(fifo, "--report")
    finally:
        os.close(reader)


def test_a_dangling_link_s_target_can_be_made(tmp_path: Path) -> None:
    link = tmp_path / "latest.json"
    link.symlink_to(tmp_path / "new" / "run.json")
    check_output_file(link, "--report")
    assert link.is_symlink() and not (tmp_path / "new" / "run.json").exists()
