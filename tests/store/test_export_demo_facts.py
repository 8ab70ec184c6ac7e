"""``agentflow report --store`` of a demo run has what the demo's own report has of its
SLOs, time scale and tools: goodput against the recorded SLOs, ``run.time_scale`` (the
HTML report divides times by it) and the tools' figures, from the recorded tool results.
(It used to have none: goodput empty, ``time_scale`` missing — read as 1 for a 20x run —
and ``tools`` empty though every call's name, outcome and duration is stored.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentflow.cli import main

from .fleets import only_run_id

_GOODPUT = ("name", "bounds", "turns", "turns_met", "output_tokens_met", "agents_met")
_ROW = ("session_id", "tool_calls", "tool_errors", "slo_turns_met", "meets_slo")


def _compare(live: dict[str, Any], stored: dict[str, Any]) -> None:
    assert stored["run"]["time_scale"] == live["run"]["time_scale"]
    assert stored["run"]["slos"] == live["run"]["slos"]
    assert stored["settings"]["slos"] == live["settings"]["slos"]
    assert [{k: g[k] for k in _GOODPUT} for g in stored["goodput"]] == [
        {k: g[k] for k in _GOODPUT} for g in live["goodput"]
    ]
    assert live["tools"]  # the workload's tools ran
    assert sorted(stored["tools"]) == sorted(live["tools"])
    for name, figures in live["tools"].items():
        got = stored["tools"][name]
        assert (got["calls"], got["errors"]) == (figures["calls"], figures["errors"])
        assert got["total_s"] == pytest.approx(figures["total_s"])
    for key in ("tool_calls", "tool_errors"):
        assert stored["fleet"][key] == live["fleet"][key]
    assert stored["fleet"]["tool_s"] == pytest.approx(live["fleet"]["tool_s"])
    rows = {r["session_id"]: r for r in stored["agents"]}
    for row in live["agents"]:
        got = rows[row["session_id"]]
        assert {k: got[k] for k in _ROW} == {k: row[k] for k in _ROW}
        assert got["tool_s"] == pytest.approx(row["tool_s"])


@pytest.mark.parametrize("virtual", [False, True], ids=["http", "virtual"])
def test_a_stored_demo_report_has_the_live_reports_slos_time_scale_and_tools(
    tmp_path: Path, virtual: bool
) -> None:
    db, live, stored = tmp_path / "runs.db", tmp_path / "live.json", tmp_path / "stored.json"
    args = ["demo", "--agents", "4", "--turns", "2:3", "--no-live",
            "--slo", "ttft=2s,tpot=50ms", "--slo", "e2e=1ms", "--store", str(db),
            "--report", str(live)]  # fmt: skip
    # (--time-scale paces the HTTP simulator; a --virtual run refuses it)
    status = main([*args, "--virtual"] if virtual else [*args, "--time-scale", "20"])
    assert status in (0, 1)
    assert main(["report", "--store", str(db), only_run_id(db), "--json", str(stored)]) == 0
    live_report = json.loads(live.read_text())
    assert live_report["run"]["time_scale"] == (1.0 if virtual else 20.0)
    _compare(live_report, json.loads(stored.read_text()))
