"""The HTML report of ``agentflow resume --report`` keeps the server section's note: the
section compares nothing there (the client's figures are the whole run's, the server's
counters this attempt's), and the note says why. The page dropped the section, note
included, since its table had no row."""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agentflow.cli import main

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the simulator child")

DEMO = ["--agents", "3", "--turns", "2:3", "--seed", "3", "--no-live"]


class _Text(HTMLParser):
    """The page's text, tags left out."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def test_a_resumed_runs_page_says_why_its_server_section_compares_nothing(
    tmp_path: Path,
) -> None:
    db, first, resumed = tmp_path / "runs.db", tmp_path / "1.json", tmp_path / "2.json"
    assert main(["demo", *DEMO, "--store", str(db), "--report", str(first)]) == 0
    run_id = json.loads(first.read_text())["run"]["run_id"]
    argv = ["resume", run_id, "--store", str(db), "--no-live", "--report", str(resumed)]
    assert main(argv) == 0
    server = json.loads(resumed.read_text())["server"]
    assert server["comparison"] == []
    (why,) = [n for n in server["notes"] if "resumed" in n]

    page = tmp_path / "r.html"
    assert main(["report", str(resumed), "--html", str(page)]) == 0
    html = page.read_text("utf-8")
    assert 'id="server"' in html
    assert '<table class="server">' not in html  # no figure to set beside another
    text = _Text()
    text.feed(html)
    assert why in text.parts
