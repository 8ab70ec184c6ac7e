"""Commands that only read a store (`agentflow report --store`, `agentflow trace export`,
the config `agentflow resume` reads first) open it without a journal: they make no
segment (8 MiB, written with zeros, then deleted), yet still commit what a killed
writer journaled before they read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentflow.cli import main
from agentflow.store import _journal, _journal_segment

from .test_journal import _kill_child, _segments

pytestmark = pytest.mark.skipif(not _journal.AVAILABLE, reason="no flock: no journal here")


@pytest.mark.parametrize("command", ["report", "trace export"])
def test_a_reading_command_reads_a_killed_run_without_making_a_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    db = tmp_path / "killed.db"
    _kill_child("fleet", str(db), "7")  # kills itself at its 7th turn end
    assert len(_segments(db)) == 1
    made: list[Path] = []
    real_init = _journal_segment._Segment.__init__

    def counted(self: _journal_segment._Segment, tmp: Path, size: int, fill: int) -> None:
        made.append(tmp)
        real_init(self, tmp, size, fill)

    monkeypatch.setattr(_journal_segment._Segment, "__init__", counted)
    out = tmp_path / "out.json"
    if command == "report":
        assert main(["report", "--store", str(db), "run-1", "--json", str(out)]) == 0
        assert json.loads(out.read_text())["fleet"]["turns"] == 7
    else:
        argv = ["trace", "export", "--store", str(db), "-o", str(out), "run-1"]
        assert main(argv) == 0
        assert len(out.read_text().splitlines()) == 7  # one request per recorded turn
    assert made == []
    assert _segments(db) == []  # the killed writer's segment: committed, then deleted
