"""docs/stats.md's first example runs as written, given a transport and sessions: it used
``RunJournal`` without importing it, and its third way ran the same sessions a second time
(a ConfigError: a session runs once). And docs/guide.md writes every call shape the way
the class takes it: ``Endpoint(base_url, api_key, …)`` read as positional, but
``Endpoint`` takes keywords only."""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import agentflow
from agentflow import Agent
from agentflow.testing import MockTransport, Reply

DOCS = Path(__file__).parents[2] / "docs"


async def test_the_stats_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (code, *_) = re.findall(r"```python\n(.*?)```", (DOCS / "stats.md").read_text(), re.S)
    code = code.replace("port=9400", "port=0")  # (any free port)
    assert "await" in code and "RunJournal" in code
    wrapped = "async def block(transport, sessions):\n" + textwrap.indent(code, "    ")
    wrapped += "\n    return locals()\n"
    namespace: dict[str, Any] = {}
    exec(compile(wrapped, "docs/stats.md", "exec"), namespace)
    monkeypatch.chdir(tmp_path)  # (it writes turns.csv)
    agent = Agent(name="a", model="m")
    out = await namespace["block"](
        MockTransport(lambda _: Reply.text("hello world")),
        [agent.session(f"t{i}") for i in range(3)],
    )
    assert [s.status for s in out["result"].sessions] == ["completed"] * 3
    assert out["report"]["fleet"]["completed"] == 3
    assert out["report"]["fleet"]["callback_errors"] == 0  # the journal was subscribed
    assert (tmp_path / "turns.csv").read_text().count("\n") == 4  # a header, three turns


def test_the_guide_passes_keyword_only_arguments_by_keyword() -> None:
    """Each `Name(a, b=…)` in the guide whose Name is a public class takes as many
    positional arguments as it shows."""
    text = (DOCS / "guide.md").read_text()
    wrong = []
    for match in re.finditer(r"`(\w+)\(([^`()]*)\)`", text):
        name, args = match.groups()
        cls = getattr(agentflow, name) if name in agentflow.__all__ else None
        if not inspect.isclass(cls) or not args.strip():
            continue
        params = inspect.signature(cls).parameters.values()
        takes = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        shown = [a for a in map(str.strip, args.split(",")) if "=" not in a and a not in "...…"]
        if len(shown) > takes:
            wrong.append(match.group(0))
    assert wrong == []
