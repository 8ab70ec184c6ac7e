"""The scheduling section of docs/benchmarks.md quotes the replicas' KV capacity it was measured
with; when the planner's figure (``benchmarks/scheduling.py``'s ``planned_kv_tokens``) has since
changed, the sentence must also give the current one — it quoted 300,896 tokens as the planner's
figure after the planner had moved to 295,152."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks are scripts, not a package
import scheduling  # noqa: E402


def _section() -> str:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    start, end = page.index("<!-- scheduling:start -->"), page.index("<!-- scheduling:end -->")
    return page[start:end]


def test_the_quoted_capacity_is_the_planners_or_gives_it() -> None:
    section = _section()
    quoted = re.search(r"capacity ([\d,]+) tokens \(([^)]*)\)", section)
    assert quoted is not None, "the section no longer quotes the KV capacity"
    planned = scheduling.planned_kv_tokens()
    if int(quoted.group(1).replace(",", "")) != planned:
        note = " ".join(quoted.group(2).split())
        assert "the planner now starts from" in note and f"gives {planned:,} tokens" in note, note
        assert "when this section was measured" in note, note
