"""docs/demo.md says the request limits are recorded in the report's ``run.timeouts``,
but with no ``--*-timeout`` flag it held ``null``: the limits the run had (the
transport's defaults) are now recorded; a ``--virtual`` run, with no HTTP requests, has
none."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from agentflow.transport import Timeouts

from ..procutil import GUARD_S


def _demo(tmp_path: Path, *flags: str) -> dict[str, object]:
    report = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "1", "--turns", "1:1",
         "--no-live", "--report", str(report), *flags],
        capture_output=True, text=True, timeout=GUARD_S * 2, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(report.read_text())["run"]
    assert isinstance(run, dict)
    return run


def test_default_limits_are_recorded_over_http(tmp_path: Path) -> None:
    run = _demo(tmp_path)
    assert run["timeouts"] == asdict(Timeouts())
    assert run["timeouts"] == {"connect": 10.0, "first_token": None, "idle": 300.0, "total": 1800.0}


def test_a_virtual_run_has_none(tmp_path: Path) -> None:
    assert _demo(tmp_path, "--virtual")["timeouts"] is None
