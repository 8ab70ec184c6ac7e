"""``agentflow resume --report`` counts times from the run's first start, as ``agentflow
report --store`` of the same run does: the resumed result holds the earlier attempts'
turns moved onto the resuming process's clock, before its own start. (``agentflow resume --report``
counted from the resuming process's start: the earlier turns were at negative times —
``agents[].first_s`` below zero, throughput buckets before zero — and disagreed with
``report --store``.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentflow.cli import main

from .fleets import only_run_id


def _times(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "rows": {r["session_id"]: (r["first_s"], r["last_s"]) for r in report["agents"]},
        "t_s": report["throughput"]["t_s"],
    }


def test_resume_report_agrees_with_report_store(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    resumed, stored = tmp_path / "resumed.json", tmp_path / "stored.json"
    demo = ["demo", "--agents", "3", "--turns", "2:3", "--time-scale", "2", "--no-live"]
    assert main([*demo, "--store", str(db)]) == 0
    run_id = only_run_id(db)
    # Every session is done: the resumed attempt runs none, its result is the earlier one's.
    assert main(["resume", run_id, "--store", str(db), "--no-live", "--report", str(resumed)]) == 0
    assert main(["report", "--store", str(db), run_id, "--json", str(stored)]) == 0
    live, back = _times(json.loads(resumed.read_text())), _times(json.loads(stored.read_text()))
    assert min(first for first, _ in live["rows"].values()) >= 0
    assert min(live["t_s"]) >= 0
    assert live["t_s"] == back["t_s"]
    assert live["rows"].keys() == back["rows"].keys()
    for sid, (first, last) in live["rows"].items():
        assert (first, last) == pytest.approx(back["rows"][sid], abs=1e-6)
