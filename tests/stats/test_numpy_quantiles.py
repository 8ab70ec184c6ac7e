"""A NumPy scalar is a quantile like a float: ``nearest_rank`` and ``Sketch.quantile``
took ``np.float32(0.5)`` before their bad-argument checks, which then refused it."""

from __future__ import annotations

import pytest

from agentflow.stats import Sketch, nearest_rank

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("q", [np.float32(0.5), np.float64(0.5), np.int64(1), np.int64(0)])
def test_numpy_scalars_are_quantiles(q: object) -> None:
    sketch = Sketch()
    for v in range(1, 101):
        sketch.add(float(v))
    assert nearest_rank(q, 10) == nearest_rank(float(q), 10)  # type: ignore[arg-type]
    assert sketch.quantile(q) == sketch.quantile(float(q))  # type: ignore[arg-type]


def test_an_int_too_large_for_a_float_is_refused_by_name() -> None:
    from agentflow import ConfigError

    with pytest.raises(ConfigError, match="an int of 1329 bits"):
        nearest_rank(10**400, 10)


def test_a_fraction_too_long_to_print_is_refused_by_name() -> None:
    from fractions import Fraction

    from agentflow import ConfigError

    with pytest.raises(ConfigError, match="a Fraction too long to print"):
        nearest_rank(Fraction(10**5000), 10)  # type: ignore[arg-type]


def test_a_numpy_relative_accuracy_is_a_number_and_a_huge_one_is_refused_by_name() -> None:
    from agentflow import ConfigError

    assert Sketch(np.float32(0.01)).quantile(0.5) is None  # (empty: no value yet)
    with pytest.raises(ConfigError, match="an int of 16610 bits"):
        Sketch(10**5000)
