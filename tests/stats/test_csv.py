"""CSV per turn: the streaming writer's rows read back equal to the rows written."""

from __future__ import annotations

import csv
import gc
import io
import warnings
from pathlib import Path

import pytest

from agentflow import ConfigError
from agentflow.stats import (
    SLO,
    FleetStats,
    TurnCSVWriter,
    TurnRow,
    read_turn_csv,
    turn_row,
    write_turn_csv,
)
from tests.stats.test_merge import workload
from tests.stats.traces import fixed_run, session_end


def test_streaming_writer_round_trip(tmp_path: Path) -> None:
    """Subscribed as a callback: one row per turn end, other events ignored; exact floats."""
    path = tmp_path / "turns.csv"
    events = fixed_run()
    with TurnCSVWriter(path, slos=[SLO(ttft_s=0.1)]) as writer:
        for e in events:
            writer(e)
        writer(session_end("a", "a-1"))
    assert writer.rows == 4
    rows = read_turn_csv(path)
    want = [turn_row(e.agent, e.session_id, e.turn, e.metrics, e.trace) for e in events]
    assert rows == want
    assert rows[3].ttft_s is None and rows[3].first_output_ns is None  # None survives
    assert rows[1].output_tokens_source == "chunk_count" and rows[1].prompt_tokens is None
    with path.open(newline="") as f:
        records = list(csv.DictReader(f))
    assert list(records[0])[: len(TurnRow.columns())] == TurnRow.columns()
    assert [r["slo:ttft<=100ms"] for r in records] == ["true", "false", "false", "false"]


def test_samples_written_and_read_back() -> None:
    """FleetStats(keep_samples=True).samples → CSV → the same rows (into any text file)."""
    stats = FleetStats(keep_samples=True)
    for e in workload(30, seed=9):
        stats(e)
    buf = io.StringIO()
    assert write_turn_csv(stats.samples, buf) == len(stats.samples) > 30
    buf.seek(0)
    assert read_turn_csv(buf) == stats.samples


def test_writer_on_an_open_file_leaves_it_open() -> None:
    """A file the writer did not open is flushed, not closed."""
    buf = io.StringIO()
    writer = TurnCSVWriter(buf, flush_every=1)
    writer(fixed_run()[0])
    writer.close()
    assert not buf.closed and buf.getvalue().count("\n") == 2


def test_bad_slos_leave_the_earlier_csv_untouched(tmp_path: Path) -> None:
    """Two SLOs with one label are a ConfigError raised before the path is opened: the
    previous run's CSV keeps its rows, and no file handle is left open."""
    path = tmp_path / "turns.csv"
    path.write_text("agent,session_id\nprevious,run\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(ConfigError, match="share the label"):
            TurnCSVWriter(path, slos=[SLO(ttft_s=1.0), SLO(ttft_s=1.0)])
        gc.collect()
    assert path.read_text(encoding="utf-8") == "agent,session_id\nprevious,run\n"
