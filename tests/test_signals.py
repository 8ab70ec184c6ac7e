"""SIGTERM, SIGINT and SIGKILL to `agentflow demo` and `agentflow sim`, as real processes.

The demo runs its simulator in a child process. Whatever ends the demo, nothing may be
left listening; SIGTERM and Ctrl-C end the run in order and write the report of what
finished, marked interrupted; ``kill -9`` leaves no child either (the kernel's
parent-death signal, Linux).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentflow.stats import report_schema
from tests.wait import read_line

from .procutil import (
    GUARD_S,
    alive,
    finished_requests,
    flag_value,
    healthy,
    listening,
    one_child,
    wait_for,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; PR_SET_PDEATHSIG")

# 600 one-turn sessions, one request at a time, on a simulator 20x slower than the rack it
# models: each request lasts at least 8 tokens x 20 / 848 tok/s, so the run cannot end
# within a minute of starting — the signals below always land mid-run.
DEMO = [
    "demo", "--agents", "600", "--max-concurrency", "1", "--turns", "1:1", "--max-tokens", "8",
    "--time-scale", "20", "--no-live",
]  # fmt: skip


class Demo:
    """`agentflow demo` in a child process, and the simulator it started."""

    def __init__(self, tmp_path: Path) -> None:
        self.report = tmp_path / "run.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentflow.cli", *DEMO, "--report", str(self.report)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            self.sim = one_child(self.proc.pid)
            self.port = int(flag_value(self.sim, "--port"))
        except BaseException:
            self.proc.kill()
            self.proc.communicate(timeout=GUARD_S)
            raise

    def wait_finished(self, n: int) -> None:
        """Until the simulator has finished ``n`` requests (so the fleet is running)."""
        wait_for(lambda: finished_requests(self.port) >= n, f"{n} finished requests")

    def exit_status(self) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=GUARD_S * 2)
        return self.proc.returncode, out.decode(errors="replace")

    def sim_gone(self) -> None:
        wait_for(lambda: not alive(self.sim), f"the simulator (pid {self.sim}) to exit")
        wait_for(lambda: not listening(self.port), f"port {self.port} to close")


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    d = Demo(tmp_path)
    try:
        yield d
    finally:
        for pid in (d.proc.pid, d.sim):
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        d.proc.wait(GUARD_S)
        if d.proc.stdout is not None:
            d.proc.stdout.close()


def read_report(path: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(path.read_text())
    jsonschema.validate(report, report_schema())
    return report


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_run_writes_the_partial_report_and_stops_the_simulator(
    demo: Demo, sig: signal.Signals, status: int
) -> None:
    demo.wait_finished(3)
    demo.proc.send_signal(sig)
    code, out = demo.exit_status()
    assert code == status, out[-3000:]
    assert f"stopped by {sig.name}" in out
    demo.sim_gone()

    report = read_report(demo.report)
    interrupted = report["run"]["interrupted"]
    assert interrupted["signal"] == sig.name
    fleet = report["fleet"]
    # Requests run one at a time, and a session's only turn ends before the next is sent:
    # three finished on the server means at least two sessions completed on the client.
    assert fleet["statuses"]["completed"] >= 2
    assert fleet["statuses"]["cancelled"] >= 1
    assert fleet["sessions"] == 600
    assert interrupted["sessions_cancelled"] == fleet["statuses"]["cancelled"]
    assert interrupted["sessions_ended"] == 600 - fleet["statuses"]["cancelled"]
    done = [a for a in report["agents"] if a["status"] == "completed"]
    assert len(done) == fleet["statuses"]["completed"]
    assert all(a["turns"] == 1 and a["decode_tps"]["mean"] > 0 for a in done)
    assert fleet["turns"] >= len(done) and fleet["output_tokens"] > 0


def test_kill_9_of_the_demo_leaves_no_simulator_listening(demo: Demo) -> None:
    wait_for(lambda: healthy(demo.port), "the simulator to serve")
    demo.proc.kill()
    assert demo.proc.wait(GUARD_S) == -signal.SIGKILL
    demo.sim_gone()  # the kernel signalled it when its parent died
    assert not demo.report.exists()


def test_a_second_signal_exits_at_once_and_still_stops_the_simulator(demo: Demo) -> None:
    demo.wait_finished(1)
    demo.proc.send_signal(signal.SIGINT)
    demo.proc.send_signal(signal.SIGINT)
    code, out = demo.exit_status()
    assert code == 130, out[-3000:]
    demo.sim_gone()


def test_sigterm_stops_agentflow_sim_and_frees_its_port() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", "sim", "--port", "0", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = read_line(proc.stdout, "the simulator's address line").decode()
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        wait_for(lambda: healthy(port), "/health to answer")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(GUARD_S) == 0  # a server's normal way to stop
        assert not listening(port)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
