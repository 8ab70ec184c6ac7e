"""What the live view writes where it is not a colour terminal: a pipe or a log file
(``agentflow demo > run.log``), ``NO_COLOR``, a narrow terminal."""

from __future__ import annotations

import io
import re

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


def _bars(console: Console, done: int) -> list[str]:
    view = LiveView(total_sessions=4, console=console)
    view.done = done
    with console.capture() as drawn:
        console.print(view.render())
    plain = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", drawn.get())  # (bold, colours)
    return [line for line in plain.splitlines() if line.startswith("sessions")]


def test_without_colours_an_empty_bar_is_not_a_full_one() -> None:
    """Done and to do were one character told apart by colour alone: without colours
    (``NO_COLOR``, a pipe) a bar at 0% looked full."""
    for console in (
        Console(file=io.StringIO(), force_terminal=True, no_color=True, width=120),
        Console(file=io.StringIO(), width=120),  # not a terminal: no colour system
    ):
        assert console.no_color or console.color_system is None
        (empty,), (half,), (full,) = (_bars(console, n) for n in (0, 2, 4))
        assert "━" not in empty and "─" * 40 in empty and empty.endswith("0%")
        assert "━" * 20 + "─" * 20 in half
        assert "━" * 40 in full and "─" not in full


def test_in_colour_the_bar_is_one_character() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=120)
    (empty,) = _bars(console, 0)
    assert "━" * 40 in empty  # the rest grey
