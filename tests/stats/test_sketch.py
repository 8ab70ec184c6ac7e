"""The sketch: within α of the exact nearest-rank quantiles, exact merges, exact moments."""

from __future__ import annotations

import math
import pickle
import random

import pytest
from ddsketch import DDSketch, LogarithmicMapping

from agentflow import ConfigError
from agentflow.stats import FleetStats, Sketch, exact_distribution, nearest_rank, quantile_name
from agentflow.stats._sketch import FLUSH_AT
from tests.stats.test_report_schema import validate
from tests.stats.traces import fixed_run

QS = (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0)


def latencies(n: int, seed: int) -> list[float]:
    """Heavy-tailed latencies from 100 µs to tens of seconds, with some exact zeros."""
    rng = random.Random(seed)
    out = [rng.lognormvariate(-3.0, 1.5) for _ in range(n)]
    out[:: max(1, n // 50)] = [0.0] * len(out[:: max(1, n // 50)])
    return out


@pytest.mark.parametrize("alpha", [0.01, 0.02, 0.005])
def test_quantiles_within_relative_accuracy(alpha: float) -> None:
    """Every quantile within α of the exact nearest-rank value; count/sum/min/max exact."""
    values = latencies(20_000, seed=1)
    sk = Sketch(alpha)
    for v in values:
        sk.add(v)
    exact = sorted(values)
    for q in QS:
        want = exact[nearest_rank(q, len(exact))]
        got = sk.quantile(q)
        assert got is not None and abs(got - want) <= alpha * want + 1e-15, (q, got, want)
    assert sk.count == len(values)
    assert sk.sum == pytest.approx(math.fsum(values), rel=1e-12)
    assert sk.min == exact[0] and sk.max == exact[-1]


def test_bulk_path_equals_ddsketch_add() -> None:
    """The buffered bulk path fills the same bins as DDSketch.add, value by value."""
    values = latencies(5_000, seed=2)
    sk = Sketch(0.01)
    sk.extend(values)
    ref = DDSketch(0.01)
    for v in values:
        ref.add(v)
    n = len(values)
    for q in QS[1:-1]:  # the extremes are the exact min and max, not a bin's value
        k = nearest_rank(q, n)
        ref_v = ref.get_quantile_value(min(1.0, (k + 0.5) / (n - 1)))
        assert ref_v is not None
        assert sk.quantile(q) == pytest.approx(ref_v, rel=1e-12)


def test_inlined_key_formula_matches_the_mapping() -> None:
    """The inlined log-gamma key equals LogarithmicMapping.key (guards a ddsketch change)."""
    rng = random.Random(3)
    for alpha in (0.01, 0.02, 0.001):
        mapping = LogarithmicMapping(alpha)
        sk = Sketch(alpha)
        mult = sk._mult
        for _ in range(2_000):
            v = 10 ** rng.uniform(-9, 6)
            assert math.ceil(math.log(v, 2) * mult) == mapping.key(v)
            key = mapping.key(v)
            assert mapping.key(mapping.value(key)) == key  # representative stays in its bin


def test_merge_equals_one_sketch() -> None:
    """Sketches of three shards, merged, give exactly the quantiles of one sketch of all."""
    values = latencies(9_000, seed=4)
    whole = Sketch()
    whole.extend(values)
    parts = [Sketch() for _ in range(3)]
    for i, v in enumerate(values):
        parts[i % 3].add(v)
    merged = Sketch()
    for p in parts:
        merged.merge(pickle.loads(pickle.dumps(p)))  # as from another process
    for q in QS:
        assert merged.quantile(q) == whole.quantile(q)
    assert merged.count == whole.count and merged.min == whole.min and merged.max == whole.max
    assert merged.sum == pytest.approx(whole.sum, rel=1e-12)
    with pytest.raises(ValueError, match="relative accuracy"):
        merged.merge(Sketch(0.02))


def test_empty_small_and_zero() -> None:
    """Empty → None; one value is every quantile; zeros are exact."""
    sk = Sketch()
    assert sk.count == 0 and sk.quantile(0.5) is None and sk.mean is None and sk.min is None
    sk.add(0.25)
    assert sk.quantiles((0.0, 0.5, 1.0)) == {"p0": 0.25, "p50": 0.25, "p100": 0.25}
    zeros = Sketch()
    zeros.extend([0.0, 0.0, 0.0, 1.0])
    assert zeros.quantile(0.5) == 0.0 and zeros.quantile(0.75) == 0.0
    assert zeros.quantile(0.76) == pytest.approx(1.0, rel=0.01)
    with pytest.raises(ValueError, match="quantile"):
        sk.quantile(1.5)


def test_buffer_is_bounded() -> None:
    """The append buffer never holds more than FLUSH_AT values."""
    sk = Sketch()
    for i in range(FLUSH_AT * 3 + 7):
        sk.add(float(i + 1))
        assert len(sk._buf) < FLUSH_AT
    assert sk.count == FLUSH_AT * 3 + 7


def test_quantile_names_and_exact_distribution() -> None:
    """Report keys, and the exact helper on an empty list."""
    assert [quantile_name(q) for q in (0.5, 0.9, 0.99, 0.999, 0.9999, 1.0)] == [
        "p50", "p90", "p99", "p99.9", "p99.99", "p100",
    ]  # fmt: skip
    assert [quantile_name(q) for q in (0.9999999, 0.99999999, 1e-7, 0.1234567, 0.07, 0.29)] == [
        "p99.99999", "p99.999999", "p0.00001", "p12.34567", "p7", "p29",
    ]  # fmt: skip
    assert exact_distribution([], [0.5]) == {
        "count": 0, "mean": None, "min": None, "max": None, "p50": None,
    }  # fmt: skip
    with pytest.raises(ConfigError, match="got True"):  # not 1.0: "p100"
        quantile_name(True)


def test_extra_quantiles_have_distinct_schema_valid_keys() -> None:
    """Keys never in exponent form (the schema's ``^p[0-9]+(\\.[0-9]+)?$``), never two alike:
    0.9999999 is not p100 (q = 1's key), and quantiles one key apart are refused."""
    stats = FleetStats(quantiles=[0.9999999, 1.0, 1e-7])
    for e in fixed_run():
        stats(e)
    report = stats.report()
    validate(report)
    assert report["settings"]["quantiles"] == [
        "p0.00001", "p50", "p90", "p99", "p99.9", "p99.99999", "p100",
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=r"0\.5 and 0\.50000000000001 would both be .*'p50'"):
        FleetStats(quantiles=[0.50000000000001])
    with pytest.raises(ConfigError, match=r"a quantile is a number in \[0, 1\], got 1\.5"):
        FleetStats(quantiles=[1.5])
