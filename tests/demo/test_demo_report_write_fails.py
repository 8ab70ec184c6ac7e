"""A demo whose report cannot be written at the end (the disk full) still prints its
summary, then fails (exit 1, one line naming the path). The report was written before
the summary was printed, and its failure ended the demo there: the run's results were
in neither. ``/dev/full`` stands in for a full disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow.cli import main

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")

DEMO = ["demo", "--agents", "2", "--turns", "1:1", "--max-tokens", "16", "--virtual", "--no-live"]


def test_the_summary_is_printed_when_the_report_cannot_be_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*DEMO, "--report", "/dev/full"]) == 1
    out, err = capsys.readouterr()
    assert "fleet summary" in out
    assert "2/2 sessions completed" in out
    assert "report written" not in out
    assert "cannot write /dev/full: No space left on device" in err
