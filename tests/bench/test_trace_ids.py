"""A trace's session ids are checked where the trace is read, as a run checks them: a
Mooncake row with ``"session_id": ""`` converted (exit 0) to a trace ``trace show`` then
refused, and ``trace show --format mooncake`` / ``bench --trace-format mooncake`` failed
naming no file or line; a session id with a control character read fine and was refused
by the run, without file:line (``docs/traces.md``: every error names file, line, field)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentflow._errors import ConfigError
from agentflow.bench import read_mooncake, read_trace
from agentflow.cli import main

ROW = {"timestamp": 0, "input_length": 10, "output_length": 5}
CONTROL = "holds a control character (U+000A), which the X-Session-ID header cannot carry"


def _write(path: Path, *rows: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("sid", "needle"),
    [("", "session_id must be a non-empty string"), ("a\nb", f"session_id {CONTROL}")],
)
def test_a_mooncake_session_id_no_run_takes_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sid: str, needle: str
) -> None:
    src = _write(tmp_path / "mc.jsonl", {**ROW, "session_id": "ok"}, {**ROW, "session_id": sid})
    out = tmp_path / "af.jsonl"
    assert main(["trace", "convert", str(src), "-o", str(out)]) == 2
    assert f"mc.jsonl:2: {needle}" in capsys.readouterr().err
    assert not out.exists()
    assert main(["trace", "show", "--format", "mooncake", str(src)]) == 2
    assert f"mc.jsonl:2: {needle}" in capsys.readouterr().err
    assert main(["bench", "--trace", str(src), "--trace-format", "mooncake"]) == 2
    assert f"mc.jsonl:2: {needle}" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=re.escape(f"mooncake trace:1: {needle}")):
        read_mooncake([json.dumps({**ROW, "session_id": sid})])


@pytest.mark.parametrize("field", ["session_id", "agent"])
def test_a_control_character_in_an_agentflow_trace_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    row: dict[str, object] = {"session_id": "s", "timestamp": 0, "input_tokens": 10}
    row[field] = "a\nb"
    src = _write(tmp_path / "nl.jsonl", row)
    assert main(["trace", "show", str(src)]) == 2
    assert f"nl.jsonl:1: {field} {CONTROL}" in capsys.readouterr().err
    assert main(["bench", "--trace", str(src)]) == 2
    assert f"nl.jsonl:1: {field} {CONTROL}" in capsys.readouterr().err


def test_a_tab_is_text_a_header_carries(tmp_path: Path) -> None:
    src = _write(
        tmp_path / "t.jsonl",
        {"session_id": "a\tb", "agent": "x\ty", "timestamp": 0, "input_tokens": 10},
    )
    (record,) = read_trace(src)
    assert record.session_id == "a\tb"
    (converted,) = read_mooncake([json.dumps({**ROW, "session_id": "a\tb"})])
    assert converted.session_id == "a\tb"
