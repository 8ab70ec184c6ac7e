"""The order docs/demo.md ("Stopping it") gives: a stopped demo's simulator child is
stopped first, then the report is written and the summary printed (the page used to say
the child was stopped after them)."""

from __future__ import annotations

import asyncio
import io
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agentflow import _process
from agentflow._cli_demo import _demo_status
from agentflow.demo import run as demo_run
from agentflow.demo._config import DemoConfig
from agentflow.demo._stop import run_stoppable as real_stoppable

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def test_the_child_is_stopped_before_the_report_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    children_at_write: list[int] = []
    real_write = demo_run._write_json
    before = set(_process._running)  # (another test's, should one be left registered)

    async def stopped_at_once(*args: Any, **kwargs: Any) -> Any:
        assert len(_process._running - before) == 1  # the simulator child serves the run
        # Ctrl-C as soon as the run's own handlers are in place (run_stoppable arms them
        # before its first await).
        asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)
        return await real_stoppable(*args, **kwargs)

    def write(path: Path, data: dict[str, Any]) -> None:
        children_at_write.append(len(_process._running - before))
        real_write(path, data)

    monkeypatch.setattr(demo_run, "run_stoppable", stopped_at_once)
    monkeypatch.setattr(demo_run, "_write_json", write)
    config = DemoConfig(
        agents=2, turns=(1, 1), max_tokens=16, live=False, report=tmp_path / "r.json"
    )
    report = demo_run.run_demo(config, console=Console(file=io.StringIO()))
    stopped = report["run"]["interrupted"]
    assert (stopped["signal"], stopped["after_run"]) == ("SIGINT", False)  # during the run
    assert _demo_status(report) == 130
    assert children_at_write == [0]  # the child had stopped when the report was written
