"""``scripts/demo`` runs ``agentflow demo`` from the caller's directory: it set up the
repository's ``.venv`` from the repository's root and then ran the demo there too, so a
relative ``--report run.json`` or ``--store runs.db`` landed in the repository, not where
the user asked for it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.wait import GUARD_S

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("bash") is None, reason="a bash script"
)

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo"

# The venv's agentflow, standing in: it says where it runs and with which arguments.
AGENTFLOW = """#!/usr/bin/env bash
printf '%s\\n' "$PWD" "$@" > "$AGENTFLOW_SEEN"
"""


def _repo(tmp_path: Path) -> Path:
    """A copy of the repository's scripts, its setup a no-op, and a venv's agentflow."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "demo")
    (repo / "scripts" / "setup").write_text('#!/usr/bin/env bash\ntouch "$PWD/setup-ran-here"\n')
    agentflow = repo / ".venv" / "bin" / "agentflow"
    agentflow.parent.mkdir(parents=True)
    agentflow.write_text(AGENTFLOW)
    agentflow.chmod(0o755)
    return repo


def test_the_demo_runs_in_the_callers_directory(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    seen = tmp_path / "seen.txt"
    subprocess.run(
        ["bash", "../repo/scripts/demo", "--no-live", "--report", "run.json"],
        cwd=user,
        env={"PATH": "/usr/bin:/bin", "AGENTFLOW_SEEN": str(seen)},
        check=True,
        timeout=GUARD_S,
    )
    cwd, *args = seen.read_text().splitlines()
    assert Path(cwd).resolve() == user.resolve()  # so run.json is the user's
    assert args == ["demo", "--no-live", "--report", "run.json"]
    assert (repo / "setup-ran-here").exists()  # setup still runs in the repository


def test_an_exported_cdpath_does_not_break_the_script(tmp_path: Path) -> None:
    """With ``CDPATH`` set (a common shell setting), ``cd scripts/..`` (run as
    ``scripts/demo`` from the repository) prints the directory it went to, which the
    script's ``ROOT=$(cd ... && pwd)`` took in as a second line: it failed."""
    repo = _repo(tmp_path)
    decoy = tmp_path / "home"  # a CDPATH entry with a scripts/ of its own
    (decoy / "scripts").mkdir(parents=True)
    seen = tmp_path / "seen.txt"
    for cdpath in (f".:{tmp_path}", str(decoy)):
        seen.unlink(missing_ok=True)
        subprocess.run(
            ["bash", "scripts/demo", "--no-live"],
            cwd=repo,
            env={"PATH": "/usr/bin:/bin", "AGENTFLOW_SEEN": str(seen), "CDPATH": cdpath},
            check=True,
            timeout=GUARD_S,
        )
        cwd, *args = seen.read_text().splitlines()
        assert Path(cwd).resolve() == repo.resolve() and args == ["demo", "--no-live"]
        assert (repo / "setup-ran-here").exists() and not (decoy / "setup-ran-here").exists()
    # The real scripts take no CDPATH into their own cd either.
    for script in ("setup", "check", "bench", "demo"):
        text = (SCRIPT.parent / script).read_text()
        assert "unset CDPATH" in text.split("cd ", 1)[0], script
