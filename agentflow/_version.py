"""The package's version, in a module of its own.

Modules that report the version (the JSON report, the HTML page, the bench report) import
it from here, never from :mod:`agentflow` itself: an upward import would load the whole
top-level package from inside one of its parts.
"""

from __future__ import annotations

__all__ = ["__version__"]

#: The version of this agentflow (the same string as ``pyproject.toml``'s).
__version__ = "0.1.0"
