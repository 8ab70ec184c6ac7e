"""``agentflow.report``'s public names: documented, and importable without matplotlib."""

from __future__ import annotations

import inspect
import subprocess
import sys

import agentflow.report


def test_every_export_has_a_docstring() -> None:
    assert len(agentflow.report.__all__) == len(set(agentflow.report.__all__))
    undocumented = [
        n
        for n in agentflow.report.__all__
        if (inspect.isclass(obj := getattr(agentflow.report, n)) or inspect.isfunction(obj))
        and not inspect.getdoc(obj)
    ]
    assert undocumented == []


def test_importing_the_package_does_not_import_matplotlib() -> None:
    """The live view and the server cross-check work without the ``report`` extra."""
    code = "import sys, agentflow.report, agentflow.demo.run; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
