"""What is written to standard error while the live view draws on a terminal stays on
standard error when that is not the terminal (``2>file``): rich's ``Live`` took it into
the view, onto standard output — ``agentflow demo --store``'s "recording run RUN_ID"
line (which docs/demo.md says is on stderr) was on the terminal, not in the file. When
standard error is a terminal too it is still printed above the view, which stays whole."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from agentflow.report import LiveView

LINE = "agentflow demo: recording run r-1 in runs.db"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _draw_with_stderr(monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    view = LiveView(total_sessions=2, console=console, refresh_per_second=1)
    monkeypatch.setattr(sys, "stderr", stderr)
    with view.live():
        print(LINE, file=sys.stderr, flush=True)
    monkeypatch.undo()
    return out.getvalue()


def test_standard_error_to_a_file_stays_there(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = io.StringIO()
    shown = _draw_with_stderr(monkeypatch, stderr)
    assert stderr.getvalue() == LINE + "\n"
    assert LINE not in shown
    assert "sessions 0/2" in shown  # the view drew


def test_standard_error_on_a_terminal_is_printed_above_the_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stderr = _Terminal()
    shown = _draw_with_stderr(monkeypatch, stderr)
    assert LINE in shown
    assert stderr.getvalue() == ""
