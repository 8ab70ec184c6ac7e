"""``agentflow report`` through its parser: on the demo's own output, with scrapes from
files, and the errors it gives for what it cannot read."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agentflow._errors import ConfigError
from agentflow.demo.run import DemoConfig, run_demo
from agentflow.report import make_figures
from agentflow.report.cli import add_parser
from tests.report.test_server import VLLM_AFTER, VLLM_BEFORE


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="agentflow")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["report", *argv])
    return int(args.func(args))


@pytest.fixture(scope="module")
def demo_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``agentflow demo --virtual --report`` writes (its run is also recorded in
    ``demo.db`` beside it)."""
    path = tmp_path_factory.mktemp("demo") / "demo.json"
    config = DemoConfig(
        agents=6, turns=(2, 4), virtual=True, live=False, report=path, store=path.with_suffix(".db")
    )
    run_demo(config, console=Console(file=io.StringIO(), width=100))
    return path


def test_report_on_the_demos_output(demo_json: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "demo.html"
    assert _run(str(demo_json), "--html", str(out), "--png-dir", str(tmp_path / "png")) == 0
    text = out.read_text("utf-8")
    for key in ("latency_cdf", "decode_tps", "interactivity", "throughput", "context_growth"):
        assert f'id="fig-{key}"' in text
        assert (tmp_path / "png" / f"{key}.png").stat().st_size > 10_000


def test_server_metrics_from_files_join_the_first_run(demo_json: Path, tmp_path: Path) -> None:
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(VLLM_BEFORE)
    after.write_text(VLLM_AFTER)
    out_json = tmp_path / "with-server.json"
    html = tmp_path / "r.html"
    argv = [str(demo_json), "--html", str(html), "--label", "demo"]
    assert (
        _run(*argv, "--server-metrics", str(before), str(after), "--write-json", str(out_json)) == 0
    )
    report = json.loads(out_json.read_text())
    assert report["server"]["counters"]["generation_tokens"] == 80
    assert {r["figure"] for r in report["server"]["comparison"]} >= {"output_tokens", "ttft_s"}
    assert 'id="server"' in html.read_text("utf-8")


def test_errors(demo_json: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--html"):
        _run(str(demo_json))
    old = tmp_path / "v1.json"
    old.write_text(json.dumps({"version": 1, "fleet": {}}))
    with pytest.raises(ConfigError, match="no schema_version; agentflow report reads"):
        _run(str(old), "--html", str(tmp_path / "x.html"))
    with pytest.raises(ConfigError, match="no such file"):
        _run(str(tmp_path / "missing.json"), "--html", str(tmp_path / "x.html"))
    with pytest.raises(ConfigError, match="2 --label for 1 runs"):
        _run(str(demo_json), "--html", "x.html", "--label", "a", "--label", "b")


def test_a_stored_run_takes_server_metrics_write_json_and_labels(
    demo_json: Path, tmp_path: Path
) -> None:
    """With ``--store`` the run is drawn like a report file: ``--server-metrics`` joins it,
    ``--write-json`` saves it so, ``--label`` names it (these were silently ignored)."""
    db, run_id = demo_json.with_suffix(".db"), json.loads(demo_json.read_text())["run"]["run_id"]
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(VLLM_BEFORE)
    after.write_text(VLLM_AFTER)
    out_json, html = tmp_path / "with-server.json", tmp_path / "r.html"
    argv = ["--store", str(db), run_id, "--html", str(html), "--label", "stored demo"]
    argv += ["--server-metrics", str(before), str(after), "--write-json", str(out_json)]
    assert _run(*argv) == 0
    report = json.loads(out_json.read_text())
    assert report["run"]["run_id"] == run_id
    assert report["server"]["counters"]["generation_tokens"] == 80
    page = html.read_text("utf-8")
    assert 'id="server"' in page and "stored demo" in page
    with pytest.raises(ConfigError, match="2 --label for 1 run ids"):
        _run("--store", str(db), run_id, "--html", str(html), "--label", "a", "--label", "b")
    with pytest.raises(ConfigError, match="--write-json needs --server-metrics"):
        _run("--store", str(db), run_id, "--write-json", str(out_json))
    with pytest.raises(ConfigError, match="cannot read"):
        _run("--store", str(db), run_id, "--server-metrics", str(tmp_path / "no"), str(after))


def test_an_output_that_is_an_input_or_another_output_is_refused(
    demo_json: Path, tmp_path: Path
) -> None:
    """``--html run.json`` (a slip) would replace the measured report with the page: every
    output is checked against the inputs and the other outputs before anything is written
    (through links and ``..`` too)."""
    run = tmp_path / "run.json"
    run.write_bytes(demo_json.read_bytes())
    link = tmp_path / "link.json"
    link.symlink_to(run)
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(VLLM_BEFORE)
    after.write_text(VLLM_AFTER)
    metrics = ["--server-metrics", str(before), str(after)]
    cases = [
        ([str(run), "--html", str(run)], "--html .* is the report .*overwrite the input"),
        ([str(run), "--html", str(tmp_path / "x" / ".." / "link.json")], "overwrite the input"),
        ([str(run), "--html", str(tmp_path / "x.html"), *metrics, "--write-json", str(before)],
         "--server"),
        ([str(run), "--html", str(tmp_path / "o.json"), *metrics, "--write-json",
          str(tmp_path / "o.json")], "--write-json .* and --html .* are the same file"),
        ([str(link), "--png-dir", str(tmp_path), "--html", str(tmp_path / "latency_cdf.png")],
         "--png-dir .*latency_cdf.png and --html"),
    ]  # fmt: skip
    db = demo_json.with_suffix(".db")
    run_id = json.loads(demo_json.read_text())["run"]["run_id"]
    cases.append((["--store", str(db), run_id, "--json", str(db)], "--json .* is --store"))
    for argv, message in cases:
        with pytest.raises(ConfigError, match=message):
            _run(*argv)
    assert run.read_bytes() == demo_json.read_bytes()
    assert before.read_text() == VLLM_BEFORE
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "x.html").exists()


def test_swapped_scrapes_or_a_restart_are_refused(demo_json: Path, tmp_path: Path) -> None:
    """Counters only grow while a server runs: BEFORE and AFTER given the other way round
    (or a restart between them) made every delta negative, drawn as the server's figures."""
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(VLLM_BEFORE)
    after.write_text(VLLM_AFTER)
    html = tmp_path / "r.html"
    argv = [str(demo_json), "--html", str(html), "--server-metrics", str(after), str(before)]
    with pytest.raises(ConfigError, match=r"counters went down .*generation_tokens.*swapped"):
        _run(*argv)
    assert not html.exists()


@pytest.mark.parametrize("which", ["before", "after"])
def test_a_bad_bucket_bound_is_one_line_naming_the_file(
    demo_json: Path, tmp_path: Path, which: str
) -> None:
    """``le="abc"`` in the AFTER scrape was a ValueError traceback; in the BEFORE one it
    was refused as "the scrapes are swapped". Either way: the file, the sample, the value."""
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    bad = (VLLM_BEFORE if which == "before" else VLLM_AFTER).replace('le="0.2"', 'le="abc"')
    before.write_text(bad if which == "before" else VLLM_BEFORE)
    after.write_text(bad if which == "after" else VLLM_AFTER)
    argv = [str(demo_json), "--html", str(tmp_path / "r.html")]
    with pytest.raises(ConfigError) as info:
        _run(*argv, "--server-metrics", str(before), str(after))
    text = str(info.value)
    assert f"{which}.prom is not a Prometheus text page" in text and "le 'abc'" in text
    assert "swapped" not in text


def test_a_page_refused_without_a_reason_still_gets_one(demo_json: Path, tmp_path: Path) -> None:
    """prometheus_client rejects ``{}`` with a bare ``ValueError()``: the message ended in
    "is not a Prometheus text page: " and nothing after it."""
    before = tmp_path / "before.prom"
    before.write_text("{}\n")
    argv = [str(demo_json), "--html", str(tmp_path / "r.html")]
    with pytest.raises(ConfigError) as info:
        _run(*argv, "--server-metrics", str(before), str(before))
    text = str(info.value)
    assert text.endswith(
        "before.prom is not a Prometheus text page: not in the text exposition format "
        "(NAME{LABELS} VALUE lines)"
    ), text


def test_write_json_is_plain_json(demo_json: Path, tmp_path: Path) -> None:
    """A NaN in the AFTER scrape is null in ``--write-json`` (it was a bare NaN token);
    a report file holding one is refused when read, not passed on."""
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(VLLM_BEFORE)
    after.write_text(VLLM_AFTER.replace("850.0", "NaN"))
    out_json = tmp_path / "with-server.json"
    argv = [str(demo_json), "--html", str(tmp_path / "r.html")]
    assert (
        _run(*argv, "--server-metrics", str(before), str(after), "--write-json", str(out_json)) == 0
    )

    def no_constant(name: str) -> None:
        raise AssertionError(f"{name} in --write-json")

    report = json.loads(out_json.read_text(), parse_constant=no_constant)
    assert report["server"]["counters"]["cache_hits"] is None
    nan = tmp_path / "nan.json"
    nan.write_text(demo_json.read_text().replace('"fleet": {', '"fleet": {"bogus": NaN, ', 1))
    with pytest.raises(ConfigError, match="NaN is not a JSON number"):
        _run(str(nan), "--html", str(tmp_path / "n.html"))


def test_gpus_must_be_more_than_0(
    demo_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--gpus 0`` (or less) was accepted and silently ignored: the plot fell back to the
    fleet's throughput, not even each report's own ``run.gpus``."""
    for bad in ("0", "-2", "nan", "two"):
        with pytest.raises(SystemExit) as exited:
            _run(str(demo_json), "--html", str(tmp_path / "r.html"), "--gpus", bad)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "argument --gpus:" in err and bad in err
    with pytest.raises(ConfigError, match="gpus must be more than 0, got 0"):
        make_figures([json.loads(demo_json.read_text())], gpus=0)
    assert not (tmp_path / "r.html").exists()


def test_a_reader_that_goes_away_ends_the_output_quietly(demo_json: Path) -> None:
    """``agentflow report --store DB ID | head``: the reader closes the pipe. The command
    stops quietly with a SIGPIPE death's status (141), not a BrokenPipeError traceback."""
    db, run_id = demo_json.with_suffix(".db"), json.loads(demo_json.read_text())["run"]["run_id"]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentflow.cli", "report", "--store", str(db), run_id],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert proc.stderr == "" and proc.returncode == 141


@pytest.mark.parametrize("flag", ["--html", "--json"])
def test_an_interrupted_write_leaves_the_old_file(
    demo_json: Path, tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--html`` and ``--json`` are written whole or not at all: Ctrl-C before the new
    file is in place leaves the old one (they were rewritten in place, truncated first)."""
    out = tmp_path / "out"
    out.write_text("the old one")

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("agentflow._files.os.replace", interrupted)
    db, run_id = demo_json.with_suffix(".db"), json.loads(demo_json.read_text())["run"]["run_id"]
    with pytest.raises(KeyboardInterrupt):
        _run("--store", str(db), run_id, flag, str(out))
    assert out.read_text() == "the old one"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary file left
