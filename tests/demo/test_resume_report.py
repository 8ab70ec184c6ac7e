"""``agentflow resume --report`` of a demo run stopped part-way: its report counts every
attempt's tool calls, as ``agentflow report --store`` of the run does. It was built from
the whole run's result but only this attempt's journal: ``fleet.tool_calls`` 3,352 beside
the tools' 3,339 (the first attempt's calls and durations missing), and
``fleet.compaction`` ``{requests: 0}`` as if measured, the first attempt's unseen."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agentflow._events import Event
from agentflow.cli import main
from agentflow.demo import run as demo_run
from agentflow.stats import RunJournal
from tests.stats.test_report_schema import validate
from tests.stats.test_tool_calls_run import tool_figures

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

DEMO = ["--agents", "4", "--turns", "3:4", "--max-tokens", "16", "--virtual", "--no-live"]


class _StopAtThirdTool(RunJournal):
    """The demo's journal, raising SIGINT in this process once 3 tool calls ended."""

    def __call__(self, event: Event) -> None:
        super().__call__(event)
        if event.type == "tool_result" and sum(e.kind == "tool" for e in self.entries) == 3:
            signal.raise_signal(signal.SIGINT)


def _tool_figures(report: dict[str, Any]) -> dict[str, Any]:
    return {**tool_figures(report), "compaction": report["fleet"]["compaction"]}


@pytest.mark.parametrize("stop_again", [False, True])
def test_a_resumed_runs_report_has_every_attempts_tool_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_again: bool
) -> None:
    """Resumed to its end, or stopped again (its result then read back from the store,
    on the first attempt's clock)."""
    db, first, resumed, stored = (tmp_path / n for n in ("runs.db", "1.json", "2.json", "3.json"))
    with monkeypatch.context() as patch:
        patch.setattr(demo_run, "RunJournal", _StopAtThirdTool)
        assert main(["demo", *DEMO, "--store", str(db), "--report", str(first)]) == 130
    partial = json.loads(first.read_text())
    ran = partial["fleet"]["tool_calls"]  # 3, and any that ended at the same instant
    assert ran >= 3 and partial["run"]["interrupted"]["sessions_cancelled"] > 0
    run_id = partial["run"]["run_id"]
    with monkeypatch.context() as patch:
        if stop_again:
            patch.setattr(demo_run, "RunJournal", _StopAtThirdTool)
        argv = ["resume", run_id, "--store", str(db), "--no-live", "--report", str(resumed)]
        assert main(argv) == (130 if stop_again else 0)
    assert main(["report", "--store", str(db), run_id, "--json", str(stored)]) == 0
    live, store = json.loads(resumed.read_text()), json.loads(stored.read_text())
    for report in (live, store):
        validate(report)
        f = report["fleet"]
        assert f["tool_calls"] == sum(t["calls"] for t in report["tools"].values()) > ran
        assert sum(a["tool_calls"] for a in report["agents"]) == f["tool_calls"]
        assert f["compaction"] is None  # the first attempt's were not seen
    assert _tool_figures(live) == _tool_figures(store)
