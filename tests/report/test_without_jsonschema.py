"""Without jsonschema (the ``report`` extra), reading a report is the documented ConfigError.

``_check_schema`` imported ``jsonschema.exceptions`` before the guarded import that says
which extra to install, so ``load_run`` and ``agentflow report x.json`` failed with a bare
``ModuleNotFoundError: jsonschema``. Each check runs in a fresh interpreter where
jsonschema cannot be imported.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.procutil import run_python
from tests.report.runs import virtual_report

NEEDS = (
    "agentflow report checks a report against its schema with jsonschema, which is not "
    "installed: pip install 'agentflow[report]'"
)


def without_jsonschema(code: str) -> subprocess.CompletedProcess[str]:
    return run_python(code, without=("jsonschema",))


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run.json"
    path.write_text(json.dumps(virtual_report(2, seed=1, label="base")))
    return path


def test_load_run_raises_the_config_error_naming_the_extra(report_file: Path) -> None:
    proc = without_jsonschema(
        textwrap.dedent(
            f"""
            from agentflow import ConfigError
            from agentflow.report import load_run
            try:
                load_run({str(report_file)!r})
            except ConfigError as exc:
                print(exc)
            """
        )
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == NEEDS


def test_agentflow_report_exits_2_with_one_line(report_file: Path, tmp_path: Path) -> None:
    argv = ["report", str(report_file), "--html", str(tmp_path / "out.html")]
    proc = without_jsonschema(f"from agentflow.cli import main; sys.exit(main({argv!r}))")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"agentflow report: error: {NEEDS}"
