"""``agentflow report --server-metrics BEFORE AFTER``: two saved pages carry no time, so
the section says when they were scraped is unknown (``null``), not ``0.0`` — a 0 read as
"scraped at the run's start and at once again after it"."""

from __future__ import annotations

from pathlib import Path

from agentflow.report.cli import _server_from_files
from tests.report.test_server import VLLM_AFTER, VLLM_BEFORE, valid


def test_scrapes_from_files_have_no_times(tmp_path: Path) -> None:
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(VLLM_BEFORE)
    after.write_text(VLLM_AFTER)
    section = valid(_server_from_files(before, after, client=None))  # type: ignore[arg-type]
    assert section["source"]["before_s"] is None
    assert section["source"]["after_s"] is None
    assert section["counters"]["generation_tokens"] == 80  # the differences are still there
