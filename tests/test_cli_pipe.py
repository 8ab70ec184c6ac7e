"""A reader of standard output that goes away early (``agentflow plan | head -3``): every
command stops quietly with the status a SIGPIPE death has, 141 — not a
``BrokenPipeError`` traceback and status 1 (``agentflow.cli.main`` handles it once for
all of them). The reader here is gone before the command starts: its first write fails.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow._cli_signals import stdout_gone
from agentflow.testing import Reply, ScriptedServer

from .wait import GUARD_S

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def closed_pipe() -> int:
    """The write end of a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize(
    "argv",
    [
        ["plan"],
        ["plan", "--list", "--json"],
        ["trace", "show", "agentic-small"],
        ["bench", "--show-workload"],
        ["bench", "--profile", "cpu-tiny", "--workload", "short", "--rate", "2", "--duration", "2"],
    ],
    ids=" ".join,
)
def test_a_reader_gone_ends_the_command_quietly(argv: list[str]) -> None:
    write = closed_pipe()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentflow.cli", *argv],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=GUARD_S, env=ENV,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")


async def test_chat_with_its_reader_gone_ends_quietly() -> None:
    async with ScriptedServer([Reply.text("The answer is forty two.")]) as srv:
        write = closed_pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agentflow.cli", "chat", "--base-url", srv.base_url,
                "--model", "m", "What is the answer?",
                stdout=write, stderr=asyncio.subprocess.PIPE, env=ENV,
            )  # fmt: skip
        finally:
            os.close(write)
        assert proc.stderr is not None
        try:
            err = await asyncio.wait_for(proc.stderr.read(), GUARD_S)
            await asyncio.wait_for(proc.wait(), GUARD_S)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert (proc.returncode, err.decode()) == (141, "")


def test_only_standard_output_s_reader_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``BrokenPipeError`` from another pipe (a child's, a connection) is an error, not
    a reader gone: only standard output's own pipe, broken, is told apart."""
    read, write = os.pipe()
    try:
        with os.fdopen(os.dup(write), "w") as out:
            monkeypatch.setattr(sys, "stdout", out)
            assert not stdout_gone()  # its reader is still there
            os.close(read)
            read = -1
            assert stdout_gone()
    finally:
        os.close(write)
        if read >= 0:
            os.close(read)
