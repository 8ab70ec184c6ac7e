"""What the live view writes where it is not a colour terminal: a pipe or a log file
(``agentflow demo > run.log``), ``NO_COLOR``, a narrow terminal."""

from __future__ import annotations

import io
import re

from rich.console import Console

from agentflow.report import LiveView
from tests.stats.traces import session_end, trace, turn_end


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


def test_a_second_stop_writes_no_second_line() -> None:
    """Stopping a stopped view is rich's no-op: it adds no blank line either."""
    out = io.StringIO()
    console = Console(file=out, width=120)
    live = LiveView(total_sessions=4, console=console).live()
    live.start()
    live.stop()
    once = out.getvalue()
    live.stop()
    assert out.getvalue() == once


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


def _agents_table(width: int, time_scale: float) -> list[str]:
    """The agents' rows of a view with 8 agents (4 of them cancelled) at ``width``."""
    out = io.StringIO()
    view = LiveView(
        total_sessions=8,
        time_scale=time_scale,
        console=Console(file=out, width=width, color_system=None),
    )
    for i in range(8):
        name = f"coder-with-a-long-name-{i:03d}"
        chunks = [50 + (10 + i) * k for k in range(11)]
        tr = trace(sent_ms=0, chunks_ms=chunks, end_ms=chunks[-1], completion=11, prompt=123_456)
        view(turn_end(name, f"s{i}", 0, tr, ready_ms=0))
        view(session_end(name, f"s{i}", status="cancelled" if i % 2 else "completed"))
    view.console.print(view.render())
    lines = out.getvalue().splitlines()
    return lines[lines.index("slowest and fastest agents (decode speed)") + 1 :]


def test_the_agents_table_fits_an_80_column_terminal() -> None:
    """Its rows were 99 columns and more: at 80 the context, retries and status columns
    were cut off."""
    header, *rows = _agents_table(80, time_scale=10)
    assert len(rows) == 8
    assert header.split() == "agent turns last TTFT decode tok/s context retries status".split()
    for line in (header, *rows):
        assert len(line) <= 80 and "…" not in line[-12:], line
    for row in rows:
        assert row.split()[-3:-1] == ["123,456", "0"]
        assert row.endswith(("completed", "cancelled"))
        assert "×10" not in row  # the speed as measured, without its scaled-back value


def test_a_wide_terminal_keeps_the_scaled_back_speed() -> None:
    _, *rows = _agents_table(160, time_scale=10)
    assert all("×10 = " in row for row in rows)
