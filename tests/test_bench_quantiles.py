"""The benchmarks' quantile helpers are nearest-rank, as they say and as the report's are
(:func:`agentflow.stats.nearest_rank`): the smallest value with at least ``p·n`` values ≤ it."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))  # the benchmarks are scripts, not a package
import agents_848  # noqa: E402
import fidelity  # noqa: E402

HELPERS: dict[str, Callable[[Sequence[float], float], float]] = {
    "fidelity.q": fidelity.q,
    "agents_848.pct": agents_848.pct,
}


@pytest.mark.parametrize("helper", HELPERS.values(), ids=HELPERS.keys())
@pytest.mark.parametrize(
    ("n", "p", "rank"),
    [
        (10, 0.5, 5),  # fidelity.q took the 6th (round-half-to-even of 5.5)
        (100, 0.99, 99),  # fidelity.q took the 100th
        (100, 0.5, 50),  # agents_848.pct took the 51st (round(49.5) = 50, 0-based)
        (4, 0.5, 2),  # agents_848.pct took the 3rd
        (1000, 0.99, 990),
        (3, 0.99, 3),  # a p99 of three values is the largest
        (1, 0.5, 1),
    ],
)
def test_nearest_rank(
    helper: Callable[[Sequence[float], float], float], n: int, p: float, rank: int
) -> None:
    values = [float(v) for v in range(n, 0, -1)]  # unsorted: the helper sorts
    assert helper(values, p) == rank


@pytest.mark.parametrize("helper", HELPERS.values(), ids=HELPERS.keys())
def test_empty_is_nan(helper: Callable[[Sequence[float], float], float]) -> None:
    assert math.isnan(helper([], 0.5))
