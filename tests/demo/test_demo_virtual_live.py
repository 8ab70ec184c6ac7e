"""`agentflow demo --virtual` draws no live view (the run goes faster than real time),
though the live view is the default: it says so, in one line on stderr, rather than
dropping the view silently; `--no-live` asks for none and gets no note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentflow.cli import main

NOTE = "note: no live view under virtual time"
DEMO = ["demo", "--agents", "2", "--turns", "1:1", "--virtual"]


def test_a_virtual_demo_says_it_draws_no_live_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, report = tmp_path / "runs.db", tmp_path / "r.json"
    assert main([*DEMO, "--store", str(db), "--report", str(report)]) == 0
    out, err = capsys.readouterr()
    assert err.count(NOTE) == 1 and err.startswith(f"agentflow demo: {NOTE}"), err
    assert NOTE not in out and "fleet summary" in out
    run_id = json.loads(report.read_text())["run"]["run_id"]
    # Its resume too (a finished run: nothing left to run, the summary all the same).
    assert main(["resume", run_id, "--store", str(db)]) == 0
    assert f"agentflow resume: {NOTE}" in capsys.readouterr().err


def test_no_live_asks_for_no_view_and_gets_no_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*DEMO, "--no-live", "--report", str(tmp_path / "r.json")]) == 0
    out, err = capsys.readouterr()
    assert "fleet summary" in out and NOTE not in err + out


def test_the_help_says_virtual_runs_have_no_live_view(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "no live view then" in text and "always so with --virtual" in text
