"""The demo summary's "decode tok/s per agent" row is the per-agent figure
(``per_agent.decode_tps``: each session's decode speed, docs/metrics.md) — what the HTML
report shows — not ``distributions.decode_tps``, one value per turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from agentflow.cli import main
from agentflow.demo.summary import _fmt, summary_table


def test_the_per_agent_row_is_per_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    args = ["--virtual", "--agents", "8", "--turns", "3:6", "--no-live", "--report", str(path)]
    assert main(["demo", *args]) == 0
    printed = capsys.readouterr().out
    report = json.loads(path.read_text())
    per_agent, per_turn = report["per_agent"]["decode_tps"], report["distributions"]["decode_tps"]
    assert per_agent["count"] == 8
    assert per_agent["p50"] != per_turn["p50"]  # the two figures differ here
    console = Console(record=True, width=200)
    console.print(summary_table(report))
    (row,) = [line for line in console.export_text().splitlines() if "per agent" in line]
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert cells == ["decode tok/s per agent", *(_fmt(per_agent[p]) for p in ("p50", "p90", "p99"))]
    assert row in printed
