"""``agentflow.planner``'s public names are documented, and it imports only ``_errors`` and
``_seconds`` (both leaves: the standard library and ``_errors``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import agentflow.planner as planner


def test_every_export_exists_and_is_documented() -> None:
    undocumented = []
    for name in planner.__all__:
        obj = getattr(planner, name)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not inspect.getdoc(obj):
            undocumented.append(name)
    assert undocumented == []


def test_the_planner_imports_nothing_of_the_client_or_the_simulator() -> None:
    """A pure calculator: its own modules, agentflow._errors, agentflow._seconds (its
    value display: a leaf, itself importing only _errors) and the standard library."""
    allowed = {"agentflow._errors", "agentflow._seconds", "agentflow.planner.cli"}
    for path in Path(planner.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith("agentflow") or name in allowed, (path.name, name)
