"""A reader of standard output that goes away early (``agentflow plan | head -3``): every
command stops quietly with the status a SIGPIPE death has, 141 — not a
``BrokenPipeError`` traceback and status 1 (``agentflow.cli.main`` handles it once for
all of them). The reader here is gone before the command starts: its first write fails.

A command asked to write files (``bench --report``, ``demo --report``) still writes them
— the run goes on, printing nowhere — and then exits 141: a reader that stopped at the
first lines (``agentflow bench --report r.json | head -1``) does not cost the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


BENCH = [
    "bench",
    "--profile",
    "cpu-tiny",
    "--workload",
    "short",
    "--rate",
    "2,3",
    "--duration",
    "3",
]


def bench_report(path: Path) -> dict[str, Any]:
    """A whole bench report: both levels measured, not interrupted."""
    report: dict[str, Any] = json.loads(path.read_text())
    assert [lvl["load"]["label"] for lvl in report["levels"]] == ["rate=2/s", "rate=3/s"]
    assert report["stopped"] == "levels done"
    return report


def demo_report(path: Path) -> dict[str, Any]:
    """A whole demo report: its 4 sessions completed, not interrupted."""
    report: dict[str, Any] = json.loads(path.read_text())
    assert report["fleet"]["statuses"]["completed"] == report["fleet"]["sessions"] == 4
    assert "interrupted" not in report["run"]
    return report


DEMO = ["demo", "--agents", "4", "--turns", "1:2"]


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        pytest.param([*BENCH, "--report", "out.json"], bench_report, id="bench --report"),
        pytest.param(
            [*BENCH, "--record", "out.jsonl"],
            lambda p: len(p.read_text().splitlines()) >= 4,
            id="bench --record",
        ),
        # The HTTP demo's live view prints first, as the fleet ends: before the report.
        pytest.param(
            [*DEMO, "--time-scale", "1", "--report", "out.json"], demo_report, id="demo --report"
        ),
        pytest.param(
            [*DEMO, "--virtual", "--no-live", "--report", "out.json"],
            demo_report,
            id="demo --virtual --report",
        ),
    ],
)
def test_a_reader_gone_still_gets_the_files_written(
    tmp_path: Path, argv: list[str], check: Any
) -> None:
    write = closed_pipe()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentflow.cli", *argv],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=GUARD_S * 2, env=ENV,
            cwd=tmp_path,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")
    assert check(tmp_path / argv[-1])


def test_bench_report_piped_to_head_keeps_its_measurements(tmp_path: Path) -> None:
    """``agentflow bench --report r.json | head -1``: the reader takes the first line and
    goes; the bench runs its levels, writes the report whole, and exits 141, quietly.
    (It used to exit 141 at its next line, with no report.)"""
    report = tmp_path / "r.json"
    with subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", *BENCH, "--report", str(report)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline().startswith("agentflow bench:")
            proc.stdout.close()  # `head -1` is done
            err = proc.stderr.read()
            proc.wait(GUARD_S)
        finally:
            proc.kill()
    assert (proc.returncode, err) == (141, "")
    bench_report(report)
