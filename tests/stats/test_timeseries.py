"""Time buckets: uniform spreading by hand, coarsening keeps sums, merges line up."""

from __future__ import annotations

import random

import pytest

from agentflow.stats import TimeSeries

S = 1_000_000_000


def test_spread_over_buckets_by_hand() -> None:
    """10 tokens over [0.5 s, 3.0 s): 2 in bucket 0, 4 in 1, 4 in 2 (rate 4/s)."""
    ts = TimeSeries(["x"])
    ts.spread("x", S // 2, 3 * S, 10.0)
    assert ts.start_ns == 0 and len(ts) == 3
    assert ts.values("x") == pytest.approx([2.0, 4.0, 4.0])


def test_long_interval_costs_two_writes() -> None:
    """A 1,000-bucket interval fills its middle through the difference array."""
    ts = TimeSeries(["x"], max_buckets=4096)
    ts.spread("x", S // 2, 1000 * S + S // 2, 1000.0)
    vals = ts.values("x")
    assert len(vals) == 1001
    assert vals[0] == pytest.approx(0.5) and vals[-1] == pytest.approx(0.5)
    assert vals[1:-1] == pytest.approx([1.0] * 999)
    assert sum(vals) == pytest.approx(1000.0)


def test_points_and_empty_intervals() -> None:
    """add() and a zero-length spread land in the bucket holding the time."""
    ts = TimeSeries(["x", "y"], bucket_ns=10)
    ts.add("x", 25, 1.0)
    ts.spread("y", 47, 47, 2.0)
    ts.spread("y", 47, 40, 3.0)  # reversed: at start
    assert ts.start_ns == 20
    assert ts.values("x") == [1.0, 0.0, 0.0]
    assert ts.values("y") == [0.0, 0.0, 5.0]


def test_extends_to_the_left_and_anchors() -> None:
    """Intervals before the first bucket prepend buckets; anchor shifts the grid."""
    ts = TimeSeries(["x"], bucket_ns=S, anchor_ns=S // 4)
    ts.add("x", 5 * S, 1.0)  # bucket [4.25, 5.25)
    ts.add("x", 2 * S, 1.0)  # bucket [1.25, 2.25)
    assert ts.start_ns == S + S // 4
    assert ts.values("x") == [1.0, 0.0, 0.0, 1.0]


def test_coarsens_and_keeps_totals() -> None:
    """Past max_buckets the width doubles; every sum survives."""
    rng = random.Random(5)
    ts = TimeSeries(["x"], bucket_ns=S, max_buckets=16)
    total = 0.0
    for _ in range(500):
        a = rng.randrange(0, 200 * S)
        b = a + rng.randrange(0, 10 * S)
        amount = rng.uniform(0, 100)
        ts.spread("x", a, b, amount)
        total += amount
    assert len(ts) <= 16 and ts.width_ns >= 16 * S
    assert ts.width_ns % S == 0 and (ts.width_ns // S) & (ts.width_ns // S - 1) == 0
    assert sum(ts.values("x")) == pytest.approx(total)


def test_merge_lines_up_buckets_and_widths() -> None:
    """Two series merged equal one series fed both, also across different widths."""
    rng = random.Random(6)
    events = [
        (rng.randrange(0, 60 * S), rng.randrange(0, 5 * S), rng.uniform(1, 9)) for _ in range(300)
    ]
    whole = TimeSeries(["x"], max_buckets=32)
    left = TimeSeries(["x"], max_buckets=32)
    right = TimeSeries(["x"], max_buckets=32)
    for a, d, v in events:
        whole.spread("x", a, a + d, v)
        (left if a < 10 * S else right).spread("x", a, a + d, v)
    assert left.width_ns < right.width_ns  # the merge has to fold the finer one
    left.merge(right)
    assert left.width_ns == whole.width_ns and left.start_ns == whole.start_ns
    assert left.values("x") == pytest.approx(whole.values("x"))
    with pytest.raises(ValueError, match="anchor"):
        left.merge(TimeSeries(["x"], anchor_ns=1))


def test_merge_into_empty_and_new_series() -> None:
    """Merging into an empty series copies; unknown series are added."""
    a = TimeSeries(["x"])
    b = TimeSeries(["x", "slo:y"])
    b.spread("slo:y", 0, 2 * S, 4.0)
    a.merge(b)
    assert a.names == ["x", "slo:y"] and a.values("slo:y") == pytest.approx([2.0, 2.0])
    assert a.values("x") == [0.0, 0.0]
