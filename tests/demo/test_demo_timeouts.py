"""`agentflow demo --idle-timeout` etc. reach the transport: a stalled stream fails on the
limit given on the command line (the default idle limit is 300 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.procutil import GUARD_S
from tests.wait import read_line


def test_idle_timeout_flag_limits_a_stalled_stream(tmp_path: Path) -> None:
    sim = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", "sim", "--port", "0", "--quiet",
         "--profile", "deepseek-v4.1-flash-gb300", "--no-fault-header",
         "--fault-stall", "1", "--stall-seconds", "600"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert sim.stdout is not None
        base = read_line(sim.stdout, "the simulator's address line").split(" at ")[1].split()[0]
        report = tmp_path / "run.json"
        demo = subprocess.run(
            [sys.executable, "-m", "agentflow.cli", "demo", "--base-url", base,
             "--agents", "1", "--turns", "1:1", "--no-live", "--report", str(report),
             "--idle-timeout", "0.3", "--connect-timeout", "5"],
            capture_output=True, text=True, timeout=GUARD_S * 2, check=False,
        )  # fmt: skip
        assert demo.returncode == 1, demo.stderr[-3000:]  # the session failed, not the command
        data = json.loads(report.read_text())
        assert data["run"]["timeouts"] == {
            "connect": 5.0,
            "first_token": None,
            "idle": 0.3,
            "total": 1800.0,
        }
        (agent,) = data["agents"]
        assert agent["status"] == "error"
        assert agent["error"].startswith("StreamTimeout") and "idle limit" in agent["error"]
    finally:
        sim.terminate()
        sim.communicate(timeout=GUARD_S)
