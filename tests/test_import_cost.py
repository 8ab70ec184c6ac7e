"""`import agentflow` loads no heavy optional library, and logs nothing unasked.

Counted, not timed: which modules are in ``sys.modules`` after the import (aiohttp, rich,
pydantic, openai and structlog are loaded when first used), and what reaches stderr.
"""

from __future__ import annotations

import subprocess
import sys

LAZY = ("aiohttp", "rich", "pydantic", "openai", "structlog", "httpx2", "matplotlib")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )


def test_import_agentflow_loads_no_heavy_library() -> None:
    """After `import agentflow` none of the lazily imported libraries is loaded, nor after
    importing the live view's name (rich is the `demo` extra's); after building a tool
    (pydantic) and making a live view (rich) they are."""
    code = (
        "import sys, agentflow\n"
        f"print(sorted(m for m in {LAZY!r} if m in sys.modules))\n"
        "def double(x: int) -> int:\n    return 2 * x\n"
        "agentflow.Tool.from_function(double)\n"
        "from agentflow.report import LiveView\n"
        "print(sorted(m for m in ('pydantic', 'rich') if m in sys.modules))\n"
        "LiveView(total_sessions=1)\n"
        "print(sorted(m for m in ('pydantic', 'rich') if m in sys.modules))\n"
    )
    lines = _run(code).stdout.splitlines()
    assert lines == ["[]", "['pydantic']", "['pydantic', 'rich']"]


def test_warnings_do_not_print_without_logging_configured() -> None:
    """An agentflow warning with no logging configured prints nothing (no last-resort
    handler); once the application configures logging, it is shown."""
    warn = (
        "from agentflow._logging import get_logger; get_logger('agentflow.x').warning('w.x', n=1)"
    )
    quiet = _run(f"import agentflow\n{warn}\n")
    assert quiet.stderr == "" and quiet.stdout == ""
    shown = _run(f"import logging, agentflow\nlogging.basicConfig()\n{warn}\n")
    assert "event='w.x'" in shown.stderr and "n=1" in shown.stderr
