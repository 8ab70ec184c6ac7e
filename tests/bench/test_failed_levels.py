"""A bench whose sessions all fail (a server that is down, a wrong model): it used to
print rows of zeros and "knee: none found" with nothing on stderr, and a sweep went on
through every level. Each level now says why its sessions failed (the commonest errors,
as the demo's summary does, also in the report under ``failures``), and a sweep stops
after a level where every session failed (``stopped: failed``).

The server is a real loopback port that refuses connections (bound, not listening).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow.cli import main


@pytest.fixture
def refused_url() -> Iterator[str]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
    try:
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    finally:
        s.close()


def test_a_sweep_stops_at_a_level_that_failed_whole_and_says_why(
    refused_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    status = main([
        "bench", "--base-url", refused_url, "--model", "x", "--rate", "4", "--duration", "1",
        "--warmup", "0", "--sweep", "--max-levels", "3", "--report", str(out),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert status == 1  # sessions failed
    report = json.loads(out.read_text())
    assert report["stopped"] == "failed"
    (level,) = report["levels"]
    assert level["statuses"]["error"] > 0 and level["statuses"]["completed"] == 0
    failed = level["sessions"]["started"]
    assert level["failures"][0] == f"{failed} sessions failed:"
    assert f"{failed} × " in level["failures"][1] and "ConnectError" in level["failures"][1]
    assert f"{failed} sessions failed:" in printed and "ConnectError" in printed
    assert "stopped: failed" in printed


def test_levels_given_one_by_one_all_run(refused_url: str, tmp_path: Path) -> None:
    """Without --sweep the levels asked for are each measured, failed or not."""
    out = tmp_path / "bench.json"
    status = main([
        "bench", "--base-url", refused_url, "--model", "x", "--rate", "2,4", "--duration", "1",
        "--warmup", "0", "--report", str(out),
    ])  # fmt: skip
    assert status == 1
    report = json.loads(out.read_text())
    assert report["stopped"] == "levels done"
    assert [len(lvl["failures"]) > 0 for lvl in report["levels"]] == [True, True]
