"""`agentflow demo` over HTTP on the simulator notes what its result does not keep (a
RunJournal): sessions that fail before finishing a turn and the retries of turns that
never finish are placed in time and drawn, and the tools' durations are in the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema

from agentflow.report import write_report
from agentflow.stats import report_schema


def demo(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "4", "--turns", "2:3",
         "--time-scale", "2", "--max-tokens", "16", "--no-live", "--report", str(report),
         *args],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert report.exists(), proc.stderr[-3000:] + proc.stdout[-3000:]
    data: dict[str, Any] = json.loads(report.read_text())
    jsonschema.validate(data, report_schema())
    return proc.returncode, data


def test_sessions_that_never_finish_a_turn_are_drawn_in_time(tmp_path: Path) -> None:
    """Every request fails (--fault-rate 1): each session fails at its first turn after
    the default policy's 4 attempts. All 12 retries and 4 failures are in the series."""
    status, report = demo(tmp_path, "--fault-rate", "1")
    assert status == 1
    f, tp = report["fleet"], report["throughput"]
    assert f["failed"] == f["sessions"] == 4 and f["turns"] == 0
    assert f["retries"] == 12 and f["errors"]["session"] == 4
    assert sum(tp["retries"]) == 12 and sum(tp["errors"]) == 4
    assert all(row["retries"] == 3 for row in report["agents"])
    figures = {f.key: f for f in write_report([report], tmp_path / "r.html")}
    caption = figures["errors_retries"].caption
    assert "12 retries, 4 errors (session 4)" in caption and "not in time" not in caption


def test_tool_durations_are_in_the_report_and_drawn(tmp_path: Path) -> None:
    status, report = demo(tmp_path)
    assert status == 0
    f, tools = report["fleet"], report["tools"]
    assert tools, "the demo's agents call tools"
    assert sum(t["calls"] for t in tools.values()) == f["tool_calls"] > 0
    assert sum(t["errors"] for t in tools.values()) == f["tool_errors"]
    assert abs(sum(t["total_s"] for t in tools.values()) - f["tool_s"]) < 1e-9
    assert f["tool_s"] > 0
    for t in tools.values():
        d = t["duration_s"]
        assert d["count"] == t["calls"] and d["max"] > 0 and d["p50"] <= d["max"] * 1.01
    assert abs(sum(row["tool_s"] for row in report["agents"]) - f["tool_s"]) < 1e-9
    figures = {f.key: f for f in write_report([report], tmp_path / "r.html")}
    fig = figures["tool_durations"]
    assert fig.png.startswith(b"\x89PNG")
    assert f"{f['tool_calls']:,} calls ({f['tool_errors']:,} failed)" in fig.caption
