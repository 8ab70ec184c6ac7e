"""``agentflow resume`` speaks as itself, and refuses a run another live process writes
before it starts anything (the simulator child took seconds, then the run was refused)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agentflow.cli import main
from agentflow.store._runlock import RunLocks

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no run lock (flock)")


def _recorded_run(db: Path, capsys: pytest.CaptureFixture[str]) -> str:
    argv = ["demo", "--virtual", "--agents", "2", "--turns", "1:2", "--max-tokens", "16",
            "--no-live", "--store", str(db)]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    found = re.search(r"^agentflow demo: recording run (\S+) in ", err, re.M)
    assert found, err
    return found.group(1)


def test_resume_names_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its line used to say "agentflow demo: resuming run …"."""
    db = tmp_path / "s.db"
    run_id = _recorded_run(db, capsys)
    assert main(["resume", run_id, "--store", str(db), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert f"agentflow resume: resuming run {run_id} in {db} " in err
    assert "agentflow demo" not in err


def test_a_run_written_by_a_live_process_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before anything starts: no "resuming run" line (it came after the
    simulator child had started, and the run with it)."""
    db = tmp_path / "s.db"
    run_id = _recorded_run(db, capsys)
    locks = RunLocks(db)
    locks.begin(run_id)  # as a live writer of the run holds it (another process's)
    try:
        status = main(["resume", run_id, "--store", str(db), "--no-live"])
        err = capsys.readouterr().err
    finally:
        locks.release(run_id)
    assert status == 1
    assert "is being written by another live process" in err, err
    assert "resuming run" not in err
    # Once the writer is gone, it resumes.
    assert main(["resume", run_id, "--store", str(db), "--no-live"]) == 0
