"""The HTML runs table of a stored run exported while it runs: its sessions cell counts
those that had not ended (``fleet.unfinished``), which it used to leave out — a run with
six sessions under way read ``0/0``."""

from __future__ import annotations

import re
from pathlib import Path

from agentflow.embedded import run_virtual
from agentflow.report import Run
from agentflow.report._html import render_html
from tests.store.test_export_unfinished import reports_midway


def test_the_runs_table_counts_a_running_runs_unfinished_sessions(tmp_path: Path) -> None:
    report, _ = run_virtual(reports_midway(tmp_path / "runs.db"))
    fleet = report["fleet"]
    assert (fleet["completed"], fleet["sessions"], fleet["unfinished"]) == (0, 0, 6)
    page = render_html([Run("during", report)], [], title="t")
    row = re.search(r'<tr><td class="text">during</td><td>([^<]*)</td>', page)
    assert row and row[1] == "0/0 (+6 unfinished)"


def test_a_run_that_ended_reads_ok_of_all() -> None:
    fleet = {"completed": 5, "sessions": 6, "unfinished": 0}
    page = render_html([Run("done", {"fleet": fleet})], [], title="t")
    row = re.search(r'<tr><td class="text">done</td><td>([^<]*)</td>', page)
    assert row and row[1] == "5/6"
