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


def test_star_import_works_without_rich_and_the_view_names_the_extra() -> None:
    """rich is the ``demo`` extra: ``from agentflow.report import *`` resolves LiveView (in
    ``__all__``) and must not need it; making a view without it says what to install."""
    code = """
import sys
class NoRich:
    def find_spec(self, name, path=None, target=None):
        if name == "rich" or name.startswith("rich."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoRich())
from agentflow.report import *
from agentflow import ConfigError
try:
    LiveView(1)
except ConfigError as exc:
    print(exc)
print("rich" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "the live view draws with rich, which is not installed: pip install 'agentflow[demo]'",
        "False",
    ]
