"""The public surface is exactly `agentflow.__all__`, sorted, and every name is documented."""

from __future__ import annotations

import inspect

import agentflow


def test_all_is_sorted_and_complete() -> None:
    """Every public name defined in the package is exported, and only those."""
    assert agentflow.__all__ == sorted(agentflow.__all__, key=str)
    public = {
        n
        for n in dir(agentflow)
        if not n.startswith("_") and not inspect.ismodule(getattr(agentflow, n))
    }
    assert public == set(agentflow.__all__) - {"__version__"}


def test_every_export_has_a_docstring() -> None:
    """A public class or function without a docstring is a documentation bug."""
    undocumented = [
        n
        for n in agentflow.__all__
        if (inspect.isclass(obj := getattr(agentflow, n)) or inspect.isfunction(obj))
        and not inspect.getdoc(obj)
    ]
    assert undocumented == []
