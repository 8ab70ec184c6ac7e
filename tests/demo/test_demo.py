"""`agentflow demo` runs end to end (small settings) and reports per-agent and fleet figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentflow.demo.workload import Repository, make_workload
from agentflow.stats import report_schema


def run_demo(tmp_path: Path, *args: str) -> dict[str, Any]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "8", "--turns", "2:4",
         "--no-live", "--report", str(report), *args],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "fleet summary" in proc.stdout
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def check_report(report: dict[str, Any], agents: int) -> None:
    """An ``agentflow.report/2`` report, valid against the shipped schema, one row per agent."""
    jsonschema.validate(report, report_schema())
    assert report["schema_version"] == "agentflow.report/2"
    fleet = report["fleet"]
    assert isinstance(fleet, dict)
    assert fleet["sessions"] == agents and fleet["completed"] == agents
    assert fleet["output_tokens"] > 0 and fleet["output_tps"] > 0
    dists = report["distributions"]
    assert dists["ttft_s"]["p50"] > 0 and dists["decode_tps"]["p50"] > 0
    assert 0 < fleet["cache_hit_rate"] <= 1  # the shared prefix hits the simulated cache
    reuse = report["prefix_reuse"]["fleet"]  # fingerprinted by the demo's ContextBudget
    assert reuse["efficiency"] is not None and reuse["efficiency"] > 0.5
    assert report["provenance"]["output_tokens"]["server_usage"]["turns"] == fleet["turns"]
    per_agent = report["agents"]
    assert isinstance(per_agent, list) and len(per_agent) == agents
    for a in per_agent:
        assert a["status"] == "completed" and a["turns"] >= 2
        assert a["decode_tps"]["mean"] > 0 and a["context_tokens"] > 0


def test_demo_over_http_against_the_simulator(tmp_path: Path) -> None:
    """Default path: the simulator in a child process, the fleet over loopback HTTP."""
    report = run_demo(tmp_path, "--time-scale", "4")
    check_report(report, 8)
    assert report["run"]["time_scale"] == 4
    # The simulator honoured each agent's tool rounds: turns = its rounds + the final answer.
    planned = make_workload(8, model="x", seed=0, turns=(2, 4)).tool_rounds
    turns = {a["agent"]: a["turns"] for a in report["agents"]}
    assert [turns[f"coder-{i:03d}"] for i in range(8)] == [r + 1 for r in planned]
    assert len(set(planned)) > 1
    # The server's own view, scraped from its /metrics before, during and after the run.
    server = report["server"]
    assert server["source"]["dialect"] == "vllm"
    compared = {row["figure"]: row for row in server["comparison"]}
    assert compared["output_tokens"]["server"] == report["fleet"]["output_tokens"]
    # The client's loop lag, and one sample per turn for the report's plots.
    assert report["run"]["loop_lag"]["count"] > 0
    assert report["run"]["reads_stamped_by"] == (
        "kernel" if sys.platform == "linux" else "event loop"
    )
    assert len(report["samples"]) == report["fleet"]["turns"]


def test_demo_in_virtual_time(tmp_path: Path) -> None:
    """--virtual: the same fleet in-process on virtual time."""
    check_report(run_demo(tmp_path, "--virtual"), 8)


def test_a_report_path_is_printed_as_written(tmp_path: Path) -> None:
    """The demo prints through rich with markup on: ``--report 'r[/x].json'`` ended a
    finished run with a MarkupError traceback (its closing tag matches nothing), after
    writing the report; its path is now printed as given."""
    report = tmp_path / "r[/x].json"
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "2", "--turns", "1:1",
         "--virtual", "--no-live", "--report", str(report)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"report written to {report}" in " ".join(proc.stdout.split())  # (wrapped)
    assert json.loads(report.read_text())["fleet"]["sessions"] == 2


def test_workload_shares_one_prefix_and_real_tools() -> None:
    """Every agent's instructions and tool schemas are byte-identical; the tools really work."""
    w = make_workload(4, model="m", seed=3)
    assert len({a.instructions for a in w.agents}) == 1
    assert len({json.dumps(a.tool_specs) for a in w.agents}) == 1
    assert all(5 <= r + 1 <= 20 for r in w.tool_rounds)
    repo = Repository.sample()
    tools = {t.name: t for t in repo.tools()}
    import asyncio

    out = asyncio.run(tools["run_tests"].invoke('{"path": "src/cache.py"}'))
    assert "PASS test_scale_cache" in out
    asyncio.run(
        tools["replace_in_file"].invoke(
            '{"path": "src/cache.py", "old": "value * factor", "new": "value + factor"}'
        )
    )
    assert "FAIL test_scale_cache" in asyncio.run(
        tools["run_tests"].invoke('{"path": "src/cache.py"}')
    )
    assert "no match" in asyncio.run(tools["search"].invoke('{"query": "zzz"}'))


@pytest.mark.parametrize(
    "bad",
    ["--turns=x", "--agents=0", "--time-scale=inf", "--time-scale=nan", "--max-tokens=990000"],
)
def test_bad_arguments_fail_clearly(bad: str, tmp_path: Path) -> None:
    """A bad option exits non-zero with a message naming it."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "demo", bad, "--no-live"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert bad.split("=")[0] in (proc.stderr + proc.stdout)
    assert "Traceback" not in proc.stderr


def test_a_recorded_run_says_its_id_and_failed_sessions_say_why(tmp_path: Path) -> None:
    """--store: the run id is said as the run starts (after a kill -9, how to resume it)
    and again at the end. Sessions that fail have their errors under the summary."""
    from agentflow import FleetResult, SessionResult
    from agentflow.demo.summary import failure_lines

    store = tmp_path / "runs.db"
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "2", "--turns", "1:1",
         "--virtual", "--no-live", "--store", str(store)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "recording run" in line]
    assert len(said) == 1
    run_id = said[0].split("recording run ")[1].split()[0]
    assert f"agentflow resume {run_id} --store {store}" in said[0]
    assert f"run {run_id} recorded in" in " ".join(proc.stdout.split())

    failed = [
        SessionResult(session_id=f"s{i}", agent="a", status="error", final_output=None,
                      messages=[], turns=[], error=ValueError(f"bad {i % 2}"))
        for i in range(5)
    ]  # fmt: skip
    lines = failure_lines(FleetResult(sessions=failed, wall_s=1.0, peak_in_flight=0))
    assert lines == ["5 sessions failed:", "  3 × ValueError: bad 0", "  2 × ValueError: bad 1"]


def test_a_report_over_the_store_is_refused(tmp_path: Path) -> None:
    """``--store runs.db --report runs.db`` (a slip) would replace the recorded run with
    the report after telling the user to resume it from there: refused before the run
    (exit 2, one line, nothing written) — the store's ``-wal``/``-shm`` files too, and on
    ``agentflow resume``."""

    def agentflow(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentflow.cli", *args],
            capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path,
        )  # fmt: skip

    demo = ["demo", "--agents", "1", "--turns", "1:1", "--virtual", "--no-live"]
    new = tmp_path / "new.db"
    proc = agentflow(*demo, "--store", str(new), "--report", str(new))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("agentflow demo: error: --report"), proc.stderr
    assert "overwrite" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not new.exists()

    store = tmp_path / "runs.db"
    proc = agentflow(*demo, "--store", str(store))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = proc.stderr.split("recording run ")[1].split()[0]
    stored = store.read_bytes()
    for report in (store, tmp_path / "runs.db-wal", tmp_path / "runs.db-shm"):
        proc = agentflow(*demo, "--store", str(store), "--report", str(report))
        assert proc.returncode == 2 and "overwrite" in proc.stderr, proc.stderr[-3000:]
    proc = agentflow("resume", run_id, "--store", "runs.db", "--report", "./runs.db")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("agentflow resume: error: --report"), proc.stderr
    assert store.read_bytes() == stored


def test_a_reader_of_the_summary_gone_costs_no_report(tmp_path: Path) -> None:
    """``agentflow demo --report r.json | head``: the report is written before the summary
    is printed, and the reader going away ends the demo quietly with 141 (rich used to
    exit 1 with no message before the report was written: the run was lost)."""
    report = tmp_path / "r.json"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the summary's first byte
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "2", "--turns", "2:3",
             "--virtual", "--no-live", "--report", str(report)],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=240, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")
    check_report(json.loads(report.read_text()), 2)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_report_file_follows_the_umask(tmp_path: Path, umask: int) -> None:
    """The report is written whole or not at all (a temporary file, then a rename), and
    its mode is what any new file gets (``0o666`` less the umask), like bench's report
    — not ``0o600`` always, the temporary file's mode from ``tempfile.mkstemp``."""
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agentflow.cli", "demo", "--agents", "1", "--turns", "1:1",
         "--virtual", "--no-live", "--report", str(report)],
        capture_output=True, text=True, timeout=240, check=False,
        umask=umask,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
