"""``agentflow bench``'s argument errors name the flag (they named the config field:
"duration must be > 0 s"), and ``--time-scale`` without ``--trace`` is refused, not
silently ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentflow.cli import main


def bench(argv: list[str]) -> int:
    """``agentflow bench ARGV``'s exit status (the parser exits on a flag's bad value)."""
    try:
        return main(["bench", *argv])
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--duration", "0"], "argument --duration: must be a finite number > 0"),
        (["--duration", "nan"], "argument --duration"),
        (["--warmup", "20", "--duration", "10"], "--warmup 20 must be shorter than --duration 10"),
        (["--warmup", "-1"], "argument --warmup: must be a finite number ≥ 0"),
        (["--repeats", "0"], "argument --repeats: must be an int ≥ 1"),
        (["--sweep", "--sweep-factor", "1"], "argument --sweep-factor: must be > 1"),
        (["--sweep", "--max-levels", "0"], "argument --max-levels: must be an int ≥ 1"),
        (["--max-in-flight", "0"], "argument --max-in-flight: must be an int ≥ 1"),
        (["--slo", "ttft=0"], "--slo: ttft='0' is not a duration > 0"),
        (["--sessions", "0"], "argument --sessions: must be an int ≥ 1"),
        (["--time-scale", "2"], "--time-scale scales a replayed trace's times: give --trace"),
        (["--trace", "agentic-small", "--time-scale", "0"], "argument --time-scale: must be"),
    ],
)
def test_errors_name_the_flag(
    args: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--profile", "cpu-tiny", "--workload", "short", "--duration", "2"]
    if "--trace" in args:
        base = ["--profile", "cpu-tiny", "--duration", "2"]
    else:
        base.extend(["--rate", "2"])
    assert bench([*base, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentflow bench: error:") and names in err and "\n" not in err


def test_the_time_scale_of_a_replay_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["--trace", "agentic-small", "--time-scale", "0.5", "--report", str(out)]
    assert bench(["--profile", "cpu-tiny", *args]) == 0
    assert json.loads(out.read_text())["run"]["source"]["time_scale"] == 0.5
    assert bench(["--profile", "cpu-tiny", "--trace", "agentic-small", "--report", str(out)]) == 0
    assert json.loads(out.read_text())["run"]["source"]["time_scale"] == 1.0


@pytest.mark.parametrize(
    ("flag", "values"), [("--rate", "1,5"), ("--concurrency", "2,4")], ids=["rate", "concurrency"]
)
def test_a_sweep_from_a_list_is_refused(
    flag: str, values: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--sweep --rate 1,5`` swept from 1 and dropped the 5 without a word."""
    argv = ["--profile", "cpu-tiny", "--workload", "short", "--duration", "2", "--sweep"]
    assert bench([*argv, flag, values]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"agentflow bench: error: --sweep starts from one {flag} value, got {values!r}: give one"
    )
