"""``agentflow resume --report`` over HTTP: the report's client figures are the whole
run's, the server's counters were scraped around this attempt only — so the server
section compares nothing and says why. It set every client figure beside this attempt's
counters: a finished run resumed showed "requests: client 10, server 0"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentflow.cli import main

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the simulator child")

DEMO = ["--agents", "3", "--turns", "2:3", "--seed", "3", "--no-live"]


def test_a_resumed_runs_server_section_compares_nothing(tmp_path: Path) -> None:
    db, first, resumed = tmp_path / "runs.db", tmp_path / "1.json", tmp_path / "2.json"
    assert main(["demo", *DEMO, "--store", str(db), "--report", str(first)]) == 0
    live = json.loads(first.read_text())
    # The run's own report compares its figures with the server's, which saw them all.
    compared = {row["figure"]: row for row in live["server"]["comparison"]}
    assert compared["requests"]["client"] == compared["requests"]["server"] > 0
    assert not [n for n in live["server"]["notes"] if "resumed" in n]

    run_id = live["run"]["run_id"]
    argv = ["resume", run_id, "--store", str(db), "--no-live", "--report", str(resumed)]
    assert main(argv) == 0  # nothing left to run: this attempt sent no request
    report = json.loads(resumed.read_text())
    assert report["fleet"]["turns"] == live["fleet"]["turns"]  # the whole run's
    server = report["server"]
    assert server["comparison"] == []
    (why,) = [n for n in server["notes"] if "resumed" in n]
    assert "every attempt" in why and "this attempt only" in why
    assert server["counters"]["requests"] in (0, 0.0, None)  # this attempt's
