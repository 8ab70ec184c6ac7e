"""``benchmarks/workers.py`` at a tiny size against the simulator: its start + stop baseline
really starts the workers, so the "without start + stop" column is not the raw one. Nothing
here asserts a speed (that is the benchmark's to measure, in ``docs/benchmarks.md``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))  # the benchmarks are scripts, not a package
import workers  # noqa: E402


def _rows(out: str) -> dict[str, list[str]]:
    """The printed table's rows: name -> the other cells."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] != "run":
            rows[cells[0]] = cells[1:]
    return rows


def test_start_stop_baseline_starts_the_workers(capsys: pytest.CaptureFixture[str]) -> None:
    """An empty run starts no worker: a baseline of zero sessions cost 0 s and left the
    steady column equal to the raw one. The baseline's workers must use CPU."""
    workers.main(["--quick", "--sessions", "4", "--tokens", "16"])
    rows = _rows(capsys.readouterr().out)
    (base,) = [name for name in rows if name.endswith("(start + stop)")]
    chunks, cpu, parent = (float(c.replace(",", "")) for c in rows[base][:3])
    assert chunks > 0  # it ran sessions, so its workers started ...
    assert cpu - parent > 0  # ... and they used CPU (spawn, imports)
    raw, steady = rows["2 workers"][3:5]
    assert steady != raw  # the baseline was subtracted


def test_a_baseline_without_worker_cpu_is_refused() -> None:
    name, sessions, tokens = workers.start_stop(2)
    assert (sessions, tokens) == (2, 1)
    with pytest.raises(SystemExit, match="no worker started"):
        workers.check_start_stop(name, [0.8, 0.0])
    workers.check_start_stop(name, [0.8, 0.7])


def test_steady_takes_out_the_baseline_cpu_and_chunks() -> None:
    # 2.0 s for 1,002 chunks, of which the baseline's 2 chunks cost 1.0 s: 1 ms per chunk
    assert workers.steady_per_chunk(2.0, 1002, 1.0, 2) == "1000.0"
    assert workers.steady_per_chunk(1.0, 2, 1.0, 2) == "–"
