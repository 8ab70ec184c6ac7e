"""A report file nested deeper than Python's ``json`` reads is refused like any other
unreadable file: a ConfigError, so ``agentflow report`` says so on one line and exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentflow._errors import ConfigError
from agentflow.report import load_run
from tests.wait import GUARD_S

DEEP = "[" * 100_000 + "]" * 100_000


def test_load_run_refuses_deep_nesting(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(DEEP)
    with pytest.raises(ConfigError, match=r"deep\.json: cannot read a JSON report: nested"):
        load_run(path)


def test_report_command_exits_2_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text(DEEP)
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "report", "deep.json", "--html", "o.html"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "nested too deeply" in proc.stderr
