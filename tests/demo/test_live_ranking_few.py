"""With ``2 * top`` agents or fewer (8, the demo's default ``top`` being 4), the live
view's slow and fast labels split the agents in halves by decode speed: the first
``top`` were all labelled slow — 2 agents, both "slow"; 5 agents, the 4th fastest "slow"."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from agentflow.report import LiveView
from tests.stats.traces import trace, turn_end


def _view(speeds_order: list[str]) -> LiveView:
    """Agents named for their rank, decode slowest first (``a0`` the slowest)."""
    view = LiveView(total_sessions=len(speeds_order), console=Console(file=io.StringIO()))
    for rank, name in enumerate(speeds_order):
        tpot_ms = 60.0 - 5 * rank
        chunks = [50 + tpot_ms * k for k in range(11)]
        tr = trace(sent_ms=0, chunks_ms=chunks, end_ms=chunks[-1], completion=11)
        view(turn_end(name, f"{name}-s", 0, tr, ready_ms=0))
    return view


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_few_agents_are_split_in_halves(n: int) -> None:
    names = [f"a{i}" for i in range(n)]
    slow, fast = _view(names).ranked()
    half = (n + 1) // 2  # the middle one of an odd number with the slow ones
    assert [a for a, _ in slow] == names[:half]
    assert [a for a, _ in fast] == names[half:]


def test_the_table_labels_two_agents_slow_and_fast() -> None:
    view = _view(["a0", "a1"])
    view.console.print(view.render())
    out = view.console.file.getvalue()  # type: ignore[attr-defined]
    rows = [line.split()[:2] for line in out.splitlines() if line.startswith(("slow ", "fast "))]
    assert rows == [["slow", "a0"], ["fast", "a1"]]


def test_more_agents_than_both_ends_show_top_of_each() -> None:
    names = [f"a{i}" for i in range(11)]
    slow, fast = _view(names).ranked()
    assert [a for a, _ in slow] == names[:4] and [a for a, _ in fast] == names[-4:]
