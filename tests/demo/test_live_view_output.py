"""What the live view writes where it is not a colour terminal: a pipe or a log file
(``agentflow demo > run.log``), ``NO_COLOR``, a narrow terminal."""

from __future__ import annotations

import io

from rich.console import Console

from agentflow.report import LiveView


def test_not_on_a_terminal_what_follows_the_view_starts_a_line() -> None:
    """The view is drawn once as it stops, and rich ends its last line only on a
    terminal: the summary's title was glued to the view's last row."""
    out = io.StringIO()
    console = Console(file=out, width=120)  # not a terminal
    with LiveView(total_sessions=4, console=console).live():
        pass
    console.print("the summary's title")
    lines = out.getvalue().splitlines()
    assert "sessions 0/4" in out.getvalue()
    assert lines[-1] == "the summary's title"
    assert lines[-2].split() == "agent turns last TTFT decode tok/s context retries status".split()


def test_a_view_that_never_started_writes_nothing() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120)
    LiveView(total_sessions=4, console=console).live().stop()
    assert out.getvalue() == ""
