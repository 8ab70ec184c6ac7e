"""``agentflow bench`` refuses, before any level runs, outputs that would overwrite the
replayed trace or one another (it wrote each in turn: the last one won)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentflow.bench import _trace_format
from agentflow.bench._trace_format import shipped_trace
from agentflow.cli import main


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        (["--report", "x", "--html", "x"], "--html {d}/x and --report {d}/x are the same file"),
        (["--report", "x", "--record", "x"], "--record {d}/x and --report {d}/x are the same file"),
        (["--html", "x", "--record", "x"], "--record {d}/x and --html {d}/x are the same file"),
    ],
)
def test_two_outputs_in_one_file_are_refused(
    tmp_path: Path, outputs: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(tmp_path / a) if a == "x" else a for a in outputs]
    status = main([
        "bench", "--profile", "cpu-tiny", "--workload", "short", "--rate", "2",
        "--duration", "2", *args,
    ])  # fmt: skip
    assert status == 2
    assert message.format(d=tmp_path) in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing ran, nothing was written


def test_recording_over_the_replayed_trace_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    text = shipped_trace("agentic-small").read_text()
    trace.write_text(text)
    status = main([
        "bench", "--profile", "cpu-tiny", "--trace", str(trace), "--duration", "1",
        "--record", str(tmp_path / "." / "t.jsonl"),
    ])  # fmt: skip
    assert status == 2
    err = capsys.readouterr().err
    assert f"is the trace {trace}: writing it would overwrite the input" in err
    assert trace.read_text() == text
    for flag in ("--report", "--html"):
        args = ["--trace", str(trace), "--duration", "1", flag, str(trace)]
        assert main(["bench", "--profile", "cpu-tiny", *args]) == 2
        assert trace.read_text() == text


def test_a_report_over_the_workload_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--workload w.json --report w.json`` replaced the workload with the report."""
    assert main(["bench", "--workload", "short", "--show-workload"]) == 0
    text = capsys.readouterr().out
    workload = tmp_path / "w.json"
    workload.write_text(text)
    for flag in ("--report", "--html", "--record"):
        status = main([
            "bench", "--profile", "cpu-tiny", "--workload", str(workload), "--rate", "2",
            "--duration", "1", flag, str(workload),
        ])  # fmt: skip
        assert status == 2
        assert f"is the workload {workload}: writing it would overwrite the input" in (
            capsys.readouterr().err
        )
        assert workload.read_text() == text


def test_the_shipped_trace_by_name_is_an_input_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--trace agentic-small`` reads the shipped file: recording over it is refused."""
    text = shipped_trace("agentic-small").read_text()
    monkeypatch.setattr(_trace_format, "_TRACES", tmp_path)  # a copy to guard, not the real one
    monkeypatch.chdir(tmp_path / "..")
    shipped = tmp_path / "agentic-small.jsonl"
    shipped.write_text(text)
    args = ["--trace", "agentic-small", "--duration", "1", "--record", str(shipped)]
    assert main(["bench", "--profile", "cpu-tiny", *args]) == 2
    assert shipped.read_text() == text


def test_distinct_outputs_are_all_written(tmp_path: Path) -> None:
    report, record = tmp_path / "r.json", tmp_path / "r.jsonl"
    status = main([
        "bench", "--profile", "cpu-tiny", "--workload", "short", "--rate", "2",
        "--duration", "2", "--report", str(report), "--record", str(record),
    ])  # fmt: skip
    assert status == 0
    assert json.loads(report.read_text())["schema_version"] == "agentflow.bench/1"
    assert json.loads(record.read_text().splitlines()[0])["session_id"]
