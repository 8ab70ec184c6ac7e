"""Every example in examples/ runs to completion (against the real servers it starts)."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentflow.testing import Reply, ScriptedServer
from tests.wait import GUARD_S

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


def _example(path: Path) -> Any:
    """``path`` as a parameter, marked ``llamacpp`` when it starts the real llama.cpp
    server (``-m "not llamacpp"``, the quick run, leaves it out)."""
    starts = "LlamaCppServer" in path.read_text()
    return pytest.param(path, id=path.name, marks=[pytest.mark.llamacpp] if starts else [])


@pytest.mark.parametrize("path", [_example(p) for p in EXAMPLES])
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


# ---- what the examples print when the server is not what they hoped ----------------------

ROOT = Path(__file__).parent.parent


def _quickstart() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "examples" / "quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readme_main(doc: str, base_url: str) -> Callable[[], Awaitable[None]]:
    """The ``main`` of the first Python block of ``doc``, against ``base_url`` (the block's
    own ``asyncio.run(main())`` left out: the test's loop runs it)."""
    code = re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S)[0]
    code = code.replace("asyncio.run(main())", "").replace("http://127.0.0.1:8080/v1", base_url)
    namespace: dict[str, Any] = {}
    exec(compile(code, doc, "exec"), namespace)
    main: Callable[[], Awaitable[None]] = namespace["main"]
    return main


@pytest.mark.parametrize("doc", ["README.md", "docs/index.md"])
async def test_the_front_page_example_prints_sessions_that_failed_before_a_turn(
    doc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session refused before its first turn (a 404: the model is wrong) has no turns:
    ``s.turns[-1]`` raised IndexError, so the example ended in a traceback."""
    async with ScriptedServer([Reply.error(404, "no such model")] * 3) as server:
        await asyncio.wait_for(_readme_main(doc, server.base_url)(), GUARD_S)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert all(line.startswith("error ") and "no such model" in line for line in lines)


async def test_quickstart_prints_sessions_that_failed_before_a_turn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """quickstart.py against a server refusing the model printed an IndexError."""
    async with ScriptedServer([Reply.error(404, "no such model")] * 2) as server:
        await asyncio.wait_for(_quickstart().main(server.base_url, "m", None, 2), GUARD_S)
    out = capsys.readouterr().out
    assert re.findall(r"^explainer-\d+\s+error\s+.*no such model", out, re.M), out
    assert len(re.findall(r"no such model", out)) == 2


async def test_quickstart_shows_what_was_not_measured_as_na(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A turn that streamed no token has no TTFT or decode speed (``None``): it was
    printed as ``ttft=0.000s decode=0.0``, a measurement of zero."""
    async with ScriptedServer([Reply.stream(content=[], completion_tokens=0)]) as server:
        await asyncio.wait_for(_quickstart().main(server.base_url, "m", None, 1), GUARD_S)
    out = capsys.readouterr().out
    assert re.search(r"^explainer-\d+\s+completed ttft=n/as decode=n/a tok/s", out, re.M), out


async def test_quickstart_runs_as_many_agents_as_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--agents 20`` ran 8 (one per term; ``terms[:agents]``), silently."""
    async with ScriptedServer([Reply.text("A term.")] * 11) as server:
        await asyncio.wait_for(_quickstart().main(server.base_url, "m", None, 11), GUARD_S)
    out = capsys.readouterr().out
    assert len(re.findall(r"^explainer-\d+\s+completed ", out, re.M)) == 11, out


def test_quickstart_refuses_fewer_than_one_agent() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "quickstart.py"),
            "--base-url",
            "x",
            "--agents",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
    assert proc.returncode == 2
    assert "--agents must be at least 1, got 0" in proc.stderr


def test_the_quick_run_leaves_out_the_examples_that_start_llamacpp() -> None:
    """README: ``-m "not llamacpp"`` skips the real llama.cpp server, but quickstart.py
    (which starts it when given no URL) was not marked, so the quick run started it."""
    target = f"{Path(__file__).relative_to(ROOT)}::test_example_runs"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not llamacpp", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    kept = re.findall(r"test_example_runs\[(.+?)\]", proc.stdout)
    assert "test_your_agent.py" in kept  # (the collection worked)
    assert "quickstart.py" not in kept
