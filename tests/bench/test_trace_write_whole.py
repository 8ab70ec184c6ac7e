"""A trace written to a path (``trace convert``, ``trace export``, ``bench --record``) is
whole or not at all: stopped part-way, the file that was there is left as it was, and
no temporary file is left beside it.

The signal is sent by the process itself after a fixed number of records (as the trace's
records are read), not after a delay: the same place on every run."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow.bench import TraceRecord, load_trace, write_trace

from ..wait import GUARD_S

# `agentflow trace convert`, its records read through a generator that sends this process
# the signal named first once half of them are written.
_SIGNAL_HALF_WAY = """
import os, signal, sys
import agentflow.bench._trace_format as fmt
from agentflow.cli import main

sig = getattr(signal, sys.argv[1])
load = fmt.load_trace

def half_way(*args, **kwargs):
    records = load(*args, **kwargs)
    for i, record in enumerate(records):
        if i == len(records) // 2:
            os.kill(os.getpid(), sig)
        yield record

fmt.load_trace = half_way
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_stopped_convert_leaves_the_old_output(tmp_path: Path, sig: signal.Signals) -> None:
    """It used to open the output with "w" and write line by line: a stopped convert left
    half a trace — valid lines, nothing to tell it was cut — where the old one was."""
    out = tmp_path / "out.jsonl"
    old = "the previous output\n"
    out.write_text(old)
    argv = ["trace", "convert", "agentic-small", "--format", "agentflow", "-o", str(out)]
    cmd = [sys.executable, "-c", _SIGNAL_HALF_WAY, sig.name, *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=GUARD_S)
    assert done.returncode == 128 + sig, done.stderr[-3000:]
    assert out.read_text() == old
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary file


def test_an_error_from_the_records_leaves_the_old_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    records = load_trace("agentic-small")
    write_trace(records, out)
    before = out.read_bytes()

    def failing() -> Iterator[TraceRecord]:
        yield from records[:3]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_trace(failing(), out)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]
    assert write_trace(records[:3], out) == 3  # and a finished one replaces it
    assert len(out.read_text().splitlines()) == 3
