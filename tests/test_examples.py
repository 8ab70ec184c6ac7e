"""Every example in examples/ runs to completion (against the real servers it starts)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))

#: What an example must print besides something: its point, shown to hold.
EXPECTED: dict[str, tuple[re.Pattern[str], ...]] = {
    # Sessions are compacted, and still finish: the simulator counts each session's tool
    # rounds by its X-Session-ID, so the rounds a summary replaced are not played again.
    "context_budget.py": (
        re.compile(r"turn \d+: summarised \d+ messages"),
        re.compile(r"^4 of 4 sessions completed$", re.M),
    ),
    # MockTransport: three sessions, two requests and one tool call each, usage decoded.
    "test_your_agent.py": (
        re.compile(
            r"^in-process: 3 sessions, 6 requests, 3 tool calls, \d+ events; "
            r"last turn: 30 prompt / 3 output tokens$",
            re.M,
        ),
        re.compile(r"^streamed: It costs 9\.5\.$", re.M),
        re.compile(r"^tool loop OK: \['user', 'assistant', 'tool', 'assistant'\]$", re.M),
    ),
}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    """The example exits 0 and prints something."""
    proc = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip()
    for expected in EXPECTED.get(path.name, ()):
        assert expected.search(proc.stdout), (expected.pattern, proc.stdout[-3000:])
