"""The calibrator's Theil–Sen fit, kept as points come and go, is the fit computed from
scratch: the same slope and offset, to the bit, over random sequences that fill and
overflow the window (pairs too close to give a slope included)."""

from __future__ import annotations

import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.context import Calibrator


def _from_scratch(points: list[tuple[int, int]]) -> tuple[float, float]:
    slopes = [
        (r2 - r1) / (e2 - e1)
        for i, (e1, r1) in enumerate(points)
        for e2, r2 in points[i + 1 :]
        if abs(e2 - e1) >= 0.1 * max(e1, e2)
    ]
    if len(slopes) >= 3:
        slope = statistics.median(slopes)
        return slope, statistics.median(r - slope * e for e, r in points)
    return statistics.median(r / e for e, r in points), 0.0


@settings(max_examples=60, deadline=None)
@given(
    window=st.integers(2, 12),
    turns=st.lists(
        st.tuples(st.integers(50, 50_000), st.floats(0.7, 1.6), st.integers(-40, 40)),
        min_size=1,
        max_size=40,
    ),
)
def test_the_kept_fit_equals_the_fit_from_scratch(
    window: int, turns: list[tuple[int, float, int]]
) -> None:
    cal = Calibrator(window=window)
    seen: list[tuple[int, int]] = []
    for estimate, ratio, noise in turns:
        reported = max(1, round(estimate * ratio) + noise)
        cal.observe("m", estimate, reported)
        seen.append((estimate, reported))
        stats = cal.stats("m")
        assert stats is not None
        assert (stats.slope, stats.offset) == _from_scratch(seen[-window:])
