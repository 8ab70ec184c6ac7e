"""The public surface is exactly `agentflow.__all__`, and every name is documented."""

from __future__ import annotations

import inspect

import agentflow


def test_all_is_sorted_and_complete() -> None:
    """Every public name defined in the package is exported once, and only those."""
    # The order is ruff's (RUF022, isort-style: constants-like names first), checked by lint.
    assert len(agentflow.__all__) == len(set(agentflow.__all__))
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
