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
    # The real llama.cpp server: every session completes, and the token events are counted.
    "quickstart.py": (
        re.compile(r"^explainer-1\s+completed ttft=[\d.]+s", re.M),
        re.compile(r"^\d+ token events · [\d.]+ output tok/s over [\d.]+ s$", re.M),
    ),
    # The client's token counts equal the server's own /metrics counters.
    "fleet_report.py": (
        re.compile(r"^  output_tokens  client\s+([\d,]+) server\s+\1$", re.M),
        re.compile(r"^  cached_tokens  client\s+([\d,]+) server\s+\1$", re.M),
        re.compile(r"^\d+ figures: .*report\.html$", re.M),
    ),
    # A timestamp in the system prompt is reported as a cache buster with its measured
    # loss, and the stable agent's prefix is served from the cache.
    "prefix_reuse.py": (
        re.compile(r"cache buster in agent 'clocked', .*\(timestamp, .*prompt tokens missed"),
        re.compile(r"^stable\s+prefix-cache hit rate ([5-9]\d|100)\.\d%$", re.M),
    ),
    # A sweep on the simulator stops past the knee; sub-agents hit the parent's prefix.
    "bench_sweep.py": (
        re.compile(r"^knee: rate=\d+/s; stopped: over-saturated$", re.M),
        re.compile(r"sub-agents, prefix-cache hit rate ([5-9]\d|100)% \(server-reported\)$", re.M),
    ),
}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    """The example exits 0 and prints what shows its point (every example has patterns)."""
    assert path.name in EXPECTED, f"{path.name}: add what it must print to EXPECTED"
    proc = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip()
    for expected in EXPECTED.get(path.name, ()):
        assert expected.search(proc.stdout), (expected.pattern, proc.stdout[-3000:])
