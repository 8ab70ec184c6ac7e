"""``agentflow bench`` end to end on the embedded simulator (virtual time), its report,
repeats with confidence intervals, and its one-line argument errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentflow.bench._bench import BenchConfig, SimTarget, Sweep, confidence_interval, run_bench
from agentflow.bench._level_entry import _plateau
from agentflow.bench._load import Load
from agentflow.bench._spec import SessionTemplate, Workload
from agentflow.bench.cli import parse_slo
from agentflow.cli import main
from agentflow.stats import SLO

from ..wait import GUARD_S

SMALL = {
    "name": "small",
    "templates": [
        {
            "name": "agent",
            "turns": 2,
            "prompt_tokens": 32,
            "output_tokens": 40,
            "tool_latency_s": 0.2,
        }
    ],
}


def test_bench_command_writes_levels_and_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps(SMALL))
    out = tmp_path / "bench.json"
    status = main([
        "bench", "--profile", "cpu-tiny", "--workload", str(wl), "--rate", "4,8",
        "--duration", "10", "--repeats", "2", "--slo", "ttft=50ms,tpot=5ms",
        "--report", str(out), "--api-key-env", "NO_SUCH_VARIABLE",
    ])  # fmt: skip
    assert status == 0
    report = json.loads(out.read_text())
    assert report["schema_version"] == "agentflow.bench/1"
    assert [lvl["load"]["label"] for lvl in report["levels"]] == ["rate=4/s", "rate=8/s"]
    lvl = report["levels"][1]
    assert lvl["window_s"] == [1.0, 10.0]  # warm-up: a tenth of the duration
    assert len(lvl["repeats"]) == 2 and lvl["ci95"]["output_tps"]["n"] == 2
    assert (
        lvl["ci95"]["output_tps"]["low"] <= lvl["output_tps"] <= lvl["ci95"]["output_tps"]["high"]
    )
    (good,) = lvl["goodput"]
    assert good["slo"] == "ttft<=50ms,tpot<=5ms" and 0 <= good["turn_fraction"] <= 1
    assert lvl["turns"] > 0 and lvl["output_tps"] > 0 and lvl["req_per_s"] > 0
    for key in ("ttft_s", "tpot_s", "decode_tps_per_agent"):
        assert lvl[key]["p50"] is not None and lvl[key]["p99"] >= lvl[key]["p50"]
    assert report["run"]["params"]["ignore_eos"] is True
    assert report["knee"]["label"] == "rate=8/s"
    text = capsys.readouterr().out
    assert "rate=8/s" in text and "knee" in text and "decode tok/s/agent" in text


def test_what_it_prints_is_never_read_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bench printed through rich with markup on: a workload named ``team/[/review]``
    was a MarkupError traceback (exit 1), ``calls[tool].jsonl`` printed as ``calls.jsonl``,
    and its own ``[over-saturated]`` mark was taken for a tag and dropped."""
    heavy = {"name": "team/[/review]", "templates": [
        {"name": "req", "turns": 1, "prompt_tokens": 64, "output_tokens": 100}]}  # fmt: skip
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps(heavy))
    report = tmp_path / "r[bold].json"
    status = main([
        "bench", "--profile", "cpu-tiny", "--workload", str(wl), "--rate", "130",
        "--arrival", "constant", "--duration", "5", "--report", str(report),
    ])  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    assert "agentflow bench: team/[/review] on sim://cpu-tiny" in out
    assert "rate=130/s:" in out and "[over-saturated]" in out
    assert f"report written to {report}" in out
    trace = tmp_path / "calls[tool].jsonl"
    trace.write_text(json.dumps({"session_id": "s", "timestamp": 0, "text": "hi"}) + "\n")
    assert main(["bench", "--profile", "cpu-tiny", "--trace", str(trace)]) == 0
    assert f"agentflow bench: trace {trace} on" in capsys.readouterr().out


def test_sessions_failing_on_their_first_turn_count_and_fail_the_run(tmp_path: Path) -> None:
    """Every request too long for the server (cpu-tiny's 2,048-token context): each session
    fails on its first turn, with no turn to place it in the window. Its end still counts
    in the level's statuses, the run exits 1 and no level is the knee."""
    wl = tmp_path / "w.json"
    too_long = {**SMALL, "templates": [{**SMALL["templates"][0], "prompt_tokens": 4000}]}  # type: ignore[dict-item]
    wl.write_text(json.dumps(too_long))
    out = tmp_path / "bench.json"
    status = main([
        "bench", "--profile", "cpu-tiny", "--workload", str(wl), "--rate", "2",
        "--arrival", "constant", "--duration", "10", "--report", str(out),
    ])  # fmt: skip
    assert status == 1
    report = json.loads(out.read_text())
    (lvl,) = report["levels"]
    assert lvl["turns"] == 0
    # Sessions started in the window [1 s, 10 s): one every 0.5 s from 1.0 to 9.5.
    assert lvl["statuses"]["error"] == lvl["sessions"]["in_window"] == 18
    assert lvl["errors"]["session"] == 20  # the two of the warm-up too
    assert report["knee"] is None


def test_show_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--workload", "fanout", "--show-workload"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "fanout" and shown["templates"][0]["fanout"]["template"] == "subagent"


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--slo", "ttft=fast"], "--slo"),
        (["--slo", "speed=2s"], "--slo"),
        (["--rate", "2", "--concurrency", "4"], "--rate and --concurrency"),
        (["--rate", "-1"], "--rate"),
        (["--concurrency", "2.5"], "--concurrency"),
        (["--workload", "nope"], "workload file 'nope'"),
        (["--profile", "nope", "--rate", "1"], "unknown simulator profile"),
        (["--duration", "5", "--warmup", "6", "--rate", "1"], "--warmup 6 must be shorter"),
        (["--concurrency", "inf"], "--concurrency values must be finite"),
        (["--rate", "nan"], "--rate values must be finite"),
        (["--rate", "1", "--sessions", "0"], "argument --sessions: must be an int ≥ 1"),
        (["--trace", "agentic-small", "--sessions", "-3"], "argument --sessions"),
        (["--trace", "agentic-small", "--sweep"], "--sweep"),
        (["--trace", "agentic-small", "--warmup", "1"], "--warmup with --trace needs --duration"),
    ],
)
def test_bad_arguments_are_one_line(
    args: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(["bench", *args])
    except SystemExit as exc:  # a flag's bad value: the parser exits
        status = int(exc.code or 0)
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentflow bench: error:") and names in err and "\n" not in err


def test_parse_slo_units() -> None:
    assert parse_slo("ttft=2s,tpot=10ms") == SLO(ttft_s=2.0, tpot_s=0.01)
    assert parse_slo("e2e=1.5, itl=250us").bounds() == {"e2e_s": 1.5, "itl_max_s": 0.00025}


def test_confidence_interval() -> None:
    ci = confidence_interval([10.0, 12.0, 14.0])
    assert ci["mean"] == 12.0 and ci["stdev"] == 2.0
    assert ci["half_width"] == pytest.approx(4.303 * 2.0 / 3**0.5)
    assert confidence_interval([5.0])["low"] is None


def test_concurrency_sweep_stops_at_the_throughput_plateau() -> None:
    """Fixed live sessions cannot build a backlog; past the server's batch (8 on
    cpu-tiny) more sessions only wait longer: throughput stops growing while TTFT rises,
    and the sweep stops there."""
    w = Workload(
        name="c",
        templates=(SessionTemplate(name="r", turns=1, prompt_tokens=64, output_tokens=100),),
    )
    report = run_bench(
        BenchConfig(
            workload=w,
            sweep=Sweep(start=2, factor=2, max_levels=6),
            concurrency_sweep=True,
            duration_s=10.0,
            warmup_s=1.0,
        ),
        SimTarget(profile="cpu-tiny"),
    )
    values = [lvl["load"]["value"] for lvl in report["levels"]]
    assert values == [2, 4, 8, 16]
    assert report["knee"]["value"] == 8  # max_num_seqs
    assert report["stopped"] == "over-saturated"
    last = report["levels"][-1]
    assert any("grew" in r for r in last["saturation"]["reasons"])


@pytest.mark.parametrize(
    ("start", "factor", "expected"),
    [
        (1, 1.5, [1, 2, 3, 4, 5, 8, 11, 17]),
        (1, 1.2, [1, 2, 3, 4, 5, 6, 7, 8]),
        (4, 1.1, [4, 5, 6, 7, 8, 9, 10, 11]),
        (2, 2.0, [2, 4, 8, 16, 32, 64, 128, 256]),
    ],
)
def test_a_concurrency_sweep_never_repeats_a_level(
    start: int, factor: float, expected: list[int]
) -> None:
    """Rounding a slow-growing sweep gave the same concurrency twice, and the repeat could
    stop the sweep as a throughput plateau; each level is now at least the last + 1."""
    w = Workload(name="x", templates=(SessionTemplate(name="r", prompt_tokens=8, output_tokens=4),))
    config = BenchConfig(
        workload=w,
        sweep=Sweep(start=start, factor=factor, max_levels=8),
        concurrency_sweep=True,
    )
    assert [load.concurrency for load in config.level_loads()] == expected


def test_the_same_concurrency_again_is_no_plateau() -> None:
    """``--concurrency 8,8`` (or 8,4): output tok/s need not grow, so a little TTFT noise
    does not make the second level over-saturated."""
    w = Workload(name="x", templates=(SessionTemplate(name="r", prompt_tokens=8, output_tokens=4),))
    config = BenchConfig(workload=w, levels=(Load(concurrency=8), Load(concurrency=8)))

    def entry(value: int, tps: float, ttft: float) -> dict[str, Any]:
        return {
            "load": {"mode": "concurrency", "value": value},
            "output_tps": tps,
            "ttft_s": {"p50": ttft},
            "saturation": {"saturated": False, "reasons": []},
        }

    for value in (8, 4):
        later = entry(value, 100.5, 0.201)
        _plateau(config, later, entry(8, 100.0, 0.200))
        assert later["saturation"] == {"saturated": False, "reasons": []}
    more = entry(16, 100.5, 0.201)
    _plateau(config, more, entry(8, 100.0, 0.200))
    assert more["saturation"]["saturated"]


def test_explicit_levels_run_in_order_and_fixed_levels_do_not_stop() -> None:
    w = Workload(name="x", templates=(SessionTemplate(name="r", prompt_tokens=8, output_tokens=4),))
    report = run_bench(
        BenchConfig(workload=w, levels=(Load(rate=200.0), Load(rate=2.0)), duration_s=5.0),
        SimTarget(profile="cpu-tiny"),
    )
    assert [lvl["load"]["value"] for lvl in report["levels"]] == [200.0, 2.0]
    assert report["stopped"] == "levels done"


def test_html_page_draws_the_levels(tmp_path: Path) -> None:
    """``--html``: agentflow report's page, one run per level — the interactivity plot
    joins the levels into the interactivity-vs-throughput curve."""
    pytest.importorskip("matplotlib")
    page = tmp_path / "bench.html"
    status = main([
        "bench", "--profile", "cpu-tiny", "--workload", "short", "--rate", "10,30",
        "--duration", "5", "--html", str(page),
    ])  # fmt: skip
    assert status == 0
    html = page.read_text()
    assert "Interactivity vs throughput" in html
    assert "rate=10/s" in html and "rate=30/s" in html


def test_html_without_matplotlib_fails_before_any_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the ``report`` extra, ``--html`` is a bad argument at once — not found out
    after every level ran, losing the run (and the ``--record`` trace written after it)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # a user without agentflow[report]
    record = tmp_path / "rec.jsonl"
    status = main([
        "bench", "--profile", "cpu-tiny", "--workload", "short", "--rate", "10",
        "--duration", "5", "--html", str(tmp_path / "b.html"), "--record", str(record),
    ])  # fmt: skip
    assert status == 2
    out, err = capsys.readouterr()
    assert "matplotlib" in err and "rate=10/s" not in out  # no level ran


def test_ctrl_c_keeps_the_levels_already_measured(tmp_path: Path) -> None:
    """SIGINT during the third level: the two finished levels and the third so far
    (``interrupted``) are written to ``--report`` (stopped: interrupted) and every session
    that ended to ``--record``; exit 130."""
    report, record = tmp_path / "bench.json", tmp_path / "rec.jsonl"
    cmd = [
        sys.executable, "-m", "agentflow.cli", "bench", "--profile", "cpu-tiny",
        "--workload", "short", "--rate", "2,4,1000", "--duration", "60",
        "--report", str(report), "--record", str(record),
    ]  # fmt: skip
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tmp_path) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:  # each level's line as soon as it is measured
                if "rate=4/s:" in line:
                    proc.send_signal(signal.SIGINT)  # the third level has begun
                    break
            status = proc.wait(timeout=120)
        finally:
            proc.kill()
    assert status == 130
    written = json.loads(report.read_text())
    assert written["stopped"] == "interrupted"
    labels = [lvl["load"]["label"] for lvl in written["levels"]]
    assert labels == ["rate=2/s", "rate=4/s", "rate=1000/s"]
    assert [lvl["interrupted"] for lvl in written["levels"]] == [False, False, True]
    assert written["knee"]["label"] == "rate=4/s"  # an interrupted level is never the knee
    assert (
        len(record.read_text().splitlines())
        >= sum(lvl["sessions"]["started"] for lvl in written["levels"][:2])
        + written["levels"][2]["statuses"]["completed"]
    )


# The bench, with a fleet callback that sends this process SIGTERM at its K-th event: the
# signal then lands inside the run's tasks (the fleet's for K=1, a session's after),
# at the same place on every run — what a `kill` at a random moment does now and then.
_SIGTERM_AT_EVENT = """
import dataclasses, os, signal, sys
import agentflow.bench._trace_cli as trace_cli
from agentflow.cli import main

at = int(sys.argv[1])
apply = trace_cli.apply_trace_arguments

def with_kill(args, config):
    config, recorder = apply(args, config)
    seen = [0]
    def kill(event):
        seen[0] += 1
        if seen[0] == at:
            os.kill(os.getpid(), signal.SIGTERM)
    return dataclasses.replace(config, callbacks=(*config.callbacks, kill)), recorder

trace_cli.apply_trace_arguments = with_kill
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("at", [0, 1, 2, 3000, 6000, 9000])
def test_sigterm_stops_the_bench_like_ctrl_c(tmp_path: Path, at: int) -> None:
    """SIGTERM stops the bench as Ctrl-C does: the run is cancelled and unwinds, what was
    measured is written, exit 143 — with nothing on stderr. It used to be raised in
    whichever task ran at that moment, which died with it: "Task exception was never
    retrieved … _Terminated()" (80 lines) or "coroutine … was never awaited". ``at``: the
    fleet event the signal comes at (0: from outside, once the bench has said it starts).
    """
    report = tmp_path / "bench.json"
    argv = ["bench", "--profile", "cpu-tiny", "--workload", "short", "--rate", "2,4",
            "--duration", "10", "--report", str(report)]  # fmt: skip
    if at:
        cmd = [sys.executable, "-c", _SIGTERM_AT_EVENT, str(at), *argv]
    else:
        cmd = [sys.executable, "-m", "agentflow.cli", *argv]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    ) as proc:
        try:
            assert proc.stdout is not None
            if not at:
                assert "agentflow bench:" in proc.stdout.readline()
                proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=GUARD_S)
        finally:
            proc.kill()
    assert proc.returncode == 143, err[-3000:]
    if at:
        assert "interrupted: writing what was measured" in out
    for noise in ("Traceback", "never retrieved", "never awaited", "Error"):
        assert noise not in err, err[-3000:]
    assert err == "", err[-3000:]
    # Inside a level (at > 0) that level, measured so far, is written; from outside the
    # signal may come before the run began, with nothing to write.
    if at or report.exists():
        assert json.loads(report.read_text())["stopped"] == "interrupted"


@pytest.mark.parametrize(
    ("args", "at"),
    [
        (["--trace", "agentic-small"], 20),  # a replay is one level
        (["--workload", "short", "--rate", "20,40", "--duration", "10"], 20_000),
    ],
    ids=["trace replay", "first level"],
)
def test_sigterm_in_the_first_level_writes_it_interrupted(
    tmp_path: Path, args: list[str], at: int
) -> None:
    """SIGTERM in a run's first level — a trace replay has no other — writes that level
    as measured until then, ``interrupted``, and never the knee. No report was written
    at all: only the levels that had finished were."""
    report, record = tmp_path / "bench.json", tmp_path / "rec.jsonl"
    argv = ["bench", "--profile", "cpu-tiny", *args, "--report", str(report),
            "--record", str(record)]  # fmt: skip
    cmd = [sys.executable, "-c", _SIGTERM_AT_EVENT, str(at), *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=GUARD_S)
    assert (done.returncode, done.stderr) == (143, "")
    assert f"report of 1 level (interrupted) written to {report}" in done.stdout
    written = json.loads(report.read_text())
    assert written["stopped"] == "interrupted" and written["knee"] is None
    (lvl,) = written["levels"]
    assert lvl["interrupted"] and lvl["repeats"][0]["interrupted"]
    assert lvl["turns"] > 0
    assert len(record.read_text().splitlines()) >= lvl["statuses"]["completed"]
