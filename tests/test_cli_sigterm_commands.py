"""SIGTERM to the ``agentflow`` commands that run an event loop, as real processes: each
ends it cleanly — the run cancelled and unwound in order, what it was writing finished,
exit status 143 and nothing on stderr — through the one handler ``agentflow.cli.main``
installs and the ``run_command`` each runs its loop with (``agentflow/_cli_signals.py``);
no command handles SIGTERM itself.

The signal comes once the run is demonstrably under way: for ``chat``, once the simulator
is decoding its request; for the commands that read a run store, from inside the run's
task at a fixed point (what a ``kill`` at an unlucky moment does now and then), since
they print nothing until they are done. ``bench`` and ``demo`` have their own tests
(``tests/bench/test_cli.py``, ``tests/test_signals.py``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentflow.cli import main
from agentflow.sim import SimServer, TextGenConfig
from agentflow.store import SQLiteStore, export_report

from .sim.simproc import dies_with_parent
from .wait import GUARD_S, eventually

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# `agentflow ARGV...` with SIGTERM sent to itself from inside the event loop's task:
# `python -c KILL_AT call MODULE:ATTR K ARGV...` as the K-th call of the async function
# ATTR begins; `item MODULE:ATTR K ...` as the K-th item of the iterable it returns is
# taken (its caller is then writing them out).
KILL_AT = """
import importlib, os, signal, sys
from agentflow.cli import main

mode, where, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
module, _, path = where.partition(":")
owner = importlib.import_module(module)
*parents, name = path.split(".")
for parent in parents:
    owner = getattr(owner, parent)
real = getattr(owner, name)
calls = [0]

def kill():
    os.kill(os.getpid(), signal.SIGTERM)

async def at_call(*args, **kwargs):
    calls[0] += 1
    if calls[0] == k:
        kill()
    return await real(*args, **kwargs)

async def at_item(*args, **kwargs):
    items = await real(*args, **kwargs)
    def each():
        for i, item in enumerate(items, 1):
            if i == k:
                kill()
            yield item
    return each()

setattr(owner, name, at_call if mode == "call" else at_item)
sys.exit(main(sys.argv[4:]))
"""


def killed(at: tuple[str, str, int], *argv: str | Path) -> tuple[int, str]:
    """``agentflow ARGV...`` sent SIGTERM at ``at`` (see :data:`KILL_AT`): its exit status
    and what it wrote to stderr."""
    mode, where, k = at
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AT, mode, where, str(k), *map(str, argv)],
        capture_output=True, text=True, timeout=GUARD_S, env=ENV, **dies_with_parent(),
    )  # fmt: skip
    return proc.returncode, proc.stderr


class Stored:
    """A finished demo run in a SQLite store, and its report and trace exported cleanly."""

    def __init__(self, root: Path) -> None:
        self.db = root / "runs.db"
        argv = ["demo", "--virtual", "--agents", "8", "--turns", "2:3", "--no-live"]
        assert main([*argv, "--store", str(self.db)]) == 0
        self.run_id = asyncio.run(_only_run(self.db))
        self.report = self.exported()
        self.trace = root / "trace.jsonl"
        assert (
            main(["trace", "export", "--store", str(self.db), self.run_id, "-o", str(self.trace)])
            == 0
        )
        assert len(self.trace.read_text().splitlines()) >= 16  # 8 sessions of 2 or 3 turns

    def exported(self) -> dict[str, Any]:
        """The run's report, as ``agentflow report --store`` exports it."""

        async def export() -> dict[str, Any]:
            async with SQLiteStore(self.db, journal=False) as store:
                return await export_report(store, self.run_id)

        return asyncio.run(export())

    def unchanged(self) -> bool:
        """Whether the store still holds the run as it was (its report is the same)."""
        return self.exported() == self.report


async def _only_run(db: Path) -> str:
    async with SQLiteStore(db, journal=False) as store:
        (run,) = await store.runs()
        return run.run_id


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    return Stored(tmp_path_factory.mktemp("stored"))


def test_trace_export_finishes_the_trace_it_is_writing(stored: Stored, tmp_path: Path) -> None:
    """SIGTERM while the trace is being written: the file is written whole, then the
    command exits 143. (Raised where it came, it cut the write: a trace of 2 requests.)"""
    out = tmp_path / "trace.jsonl"
    code, err = killed(
        ("item", "agentflow.bench._record:record_store", 3),
        "trace", "export", "--store", stored.db, stored.run_id, "-o", out,
    )  # fmt: skip
    assert (code, err) == (143, "")
    assert out.read_text() == stored.trace.read_text()
    assert stored.unchanged()


def test_report_from_a_store_stops_without_writing(stored: Stored, tmp_path: Path) -> None:
    """SIGTERM as the run is read: the store is closed in order and left as it was; no
    --json file, no traceback."""
    out = tmp_path / "out.json"
    code, err = killed(
        ("call", "agentflow.store:export_report", 1),
        "report", "--store", stored.db, stored.run_id, "--json", out,
    )  # fmt: skip
    assert (code, err) == (143, "")
    assert not out.exists()
    assert not Path(f"{stored.db}-wal").exists()  # closed in order: SQLite removed its log
    assert stored.unchanged()


def test_resume_stops_while_it_reads_the_run(stored: Stored) -> None:
    code, err = killed(
        ("call", "agentflow.store:SQLiteStore.load", 1),
        "resume", stored.run_id, "--store", stored.db, "--no-live",
    )  # fmt: skip
    assert (code, err) == (143, "")
    assert stored.unchanged()


async def test_chat_stops_mid_answer_quietly() -> None:
    """SIGTERM while the simulator decodes chat's answer (long, and slowed down)."""
    textgen = TextGenConfig(tool_rounds=0, answer_tokens=(1500, 1500))
    async with SimServer("cpu-tiny", time_scale=20.0, textgen=textgen) as sim:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentflow.cli", "chat", "--base-url", sim.base_url,
            "--model", sim.model, "--max-tokens", "1500", "Tell me a long story.",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV,
            **dies_with_parent(),
        )  # fmt: skip
        try:
            await eventually(lambda: sim.engine.num_running > 0, "the answer to be decoded")
            proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), GUARD_S)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert (proc.returncode, err.decode()) == (143, "")
    assert out == b""  # not a terminal: the answer is printed whole or not at all
