"""docs/reliability.md: the tool snippets run as they are (each defines what it uses)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = (Path(__file__).parents[2] / "docs" / "reliability.md").read_text()


@pytest.mark.parametrize(
    ("marker", "caps"),
    [
        ("tool_timeout_s=120", {"search": None, "read_file": None}),
        ("max_tool_output_chars=20_000", {"read_file": None, "grep": 2_000}),
    ],
)
def test_the_tool_snippets_run_as_they_are(marker: str, caps: dict[str, int | None]) -> None:
    """The output-cap snippet used grep and read_file before defining them (read_file not
    at all), and the time-limit one read_file: a NameError when run."""
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", DOC, re.S) if marker in c]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/reliability.md", "exec"), namespace)
    agent = namespace["agent"]
    tools = {t.name: t.max_output_chars for t in agent.tools}  # type: ignore[attr-defined]
    assert tools == caps
