"""A signal once ``agentflow bench``'s run has ended — while its table prints and its
files are written — waits until they are written, then the bench exits 130 / 143.

The signal is sent by the process itself at a fixed point (as ``write_recording``
begins), not after a delay: the same place on every run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..wait import GUARD_S

# The bench, with `write_recording` sending this process the signal(s) named first as it
# begins: the run is over, nothing is written yet.
_SIGNAL_AS_RECORDING_STARTS = """
import os, signal, sys
import agentflow.bench._trace_cli as trace_cli
from agentflow.cli import main

sigs = [getattr(signal, name) for name in sys.argv[1].split(",")]
write = trace_cli.write_recording

def signalled(recorder, path):
    for sig in sigs:
        os.kill(os.getpid(), sig)
    return write(recorder, path)

trace_cli.write_recording = signalled
sys.exit(main(sys.argv[2:]))
"""


def _bench(tmp_path: Path, sigs: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    report, record = tmp_path / "bench.json", tmp_path / "rec.jsonl"
    argv = ["bench", "--profile", "cpu-tiny", "--workload", "short", "--rate", "4",
            "--duration", "5", "--report", str(report), "--record", str(record)]  # fmt: skip
    cmd = [sys.executable, "-c", _SIGNAL_AS_RECORDING_STARTS, sigs, *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=GUARD_S)
    return done, report, record


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_after_the_run_waits_for_the_files(tmp_path: Path, sig: signal.Signals) -> None:
    """Both files are written whole, then exit 128 + signal. They used to be lost: the
    handler that writes what was measured covered only the run, and the signal raised at
    once (exit 130 / 143, no file, no word)."""
    done, report, record = _bench(tmp_path, sig.name)
    assert done.returncode == 128 + sig, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert f"{sig.name}: the run had ended" in done.stderr
    assert f"report written to {report}" in done.stdout
    written = json.loads(report.read_text())
    assert written["stopped"] != "interrupted"  # the whole run: nothing was cut short
    (lvl,) = written["levels"]
    lines = record.read_text().splitlines()
    assert len(lines) >= lvl["statuses"]["completed"] > 0
    assert all(json.loads(line) for line in lines)


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    """A second signal means "now": exit 130, without the files."""
    done, report, _ = _bench(tmp_path, "SIGINT,SIGINT")
    assert done.returncode == 130, done.stderr[-3000:]
    assert "SIGINT again: exiting" in done.stderr
    assert not report.exists()
