"""A mergeable quantile sketch: DDSketch for the quantiles, exact count, sum, min and max.

Why DDSketch (the ``ddsketch`` package, Datadog's reference implementation):

- its error is *relative* to the value (1 % by default: a true p99 TTFT of 2.000 s is
  reported within 1.980–2.020 s), which is what latencies spanning 100 µs to minutes need —
  a rank-error sketch (t-digest, KLL) can be arbitrarily wrong in value at a heavy tail;
- merging is exact: two sketches merged hold the same bin counts as one sketch fed both
  streams, so per-worker sketches combine into the single-process result;
- its size depends on the value *range*, not the count: 1 % accuracy covers 1 µs–10 min
  in ~1,000 bins, however long the run.

HdrHistogram gives the same kind of guarantee (fixed significant digits) but needs its
range declared up front and allocates its whole count array per histogram (~25 KB of
64-bit counters at 2 significant digits over 1 µs–1 h).

Adding one value through ``DDSketch.add`` costs ~1.5 µs of Python. A fleet callback runs
inline on the hot path, so :class:`Sketch` only *appends* to a small buffer and folds
the buffer into the DDSketch in bulk (one logarithm per value, one ``add`` per distinct
bin: ~0.25–0.4 µs per value) when it holds :data:`FLUSH_AT` values or when it is read.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable, Sequence

from ddsketch import DDSketch, LogarithmicMapping

from agentflow._errors import ConfigError
from agentflow._seconds import shown

__all__ = [
    "DEFAULT_RELATIVE_ACCURACY",
    "FLUSH_AT",
    "Sketch",
    "check_quantiles",
    "nearest_rank",
    "quantile_name",
]

#: DDSketch's relative accuracy α: every quantile is within ±α of the true value.
DEFAULT_RELATIVE_ACCURACY = 0.01

#: Buffered values folded into the sketch at once.
FLUSH_AT = 1024


def quantile_name(q: float) -> str:
    """The report key of quantile ``q`` (0–1): ``0.5 → "p50"``, ``0.999 → "p99.9"``.

    The percentage in fixed point, to 10 decimals: ``0.9999999 → "p99.99999"``,
    ``1e-7 → "p0.00001"`` — never an exponent, and never rounded to a neighbour's key.

    Raises:
        ConfigError: ``q`` is not a number in [0, 1].
    """
    _check_q(q)
    return "p" + f"{q * 100:.10f}".rstrip("0").rstrip(".")


def _real(value: object) -> float | None:
    """``value`` as a float if it is a real number (a NumPy scalar too; not a bool), else
    ``None`` — an int too large for a float included."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except (OverflowError, TypeError, ValueError):
        return None


def _check_q(q: object) -> None:
    """Raise :class:`ConfigError` unless ``q`` is a real number in [0, 1] (NaN is not; a
    NumPy scalar is one)."""
    v = _real(q)
    if v is None or not 0.0 <= v <= 1.0:
        raise ConfigError(f"a quantile is a number in [0, 1], got {shown(q)}")


def check_quantiles(qs: Iterable[float]) -> tuple[float, ...]:
    """``qs`` valid, sorted and without repeats; no two may share a report key.

    Raises:
        ConfigError: ``qs`` is not an iterable, a quantile is not a number in [0, 1], or
            two keys collide (they differ only past the key's 10th decimal of a percent).
    """
    try:
        given = tuple(qs)
    except TypeError:
        raise ConfigError(f"quantiles must be an iterable of numbers, got {qs!r}") from None
    for q in given:  # each checked before sorting, which compares them
        _check_q(q)
    out = tuple(sorted(set(given)))
    names: dict[str, float] = {}
    for q in out:
        name = quantile_name(q)
        if name in names:
            raise ConfigError(
                f"quantiles {names[name]!r} and {q!r} would both be reported as {name!r}"
            )
        names[name] = q
    return out


def nearest_rank(q: float, n: int) -> int:
    """The 0-based rank of quantile ``q`` among ``n`` sorted values: ``⌈q·n⌉ − 1``, at least 0.

    The nearest-rank definition: the smallest value with at least ``q·n`` values ≤ it, so a
    p99 of three values is the largest, never an interpolation. (``q·n`` is nudged down by
    1e-9 so that 0.07 · 100 = 7.000000000000001 counts as 7.)

    Raises:
        ConfigError: ``q`` is not a number in [0, 1] (a rank past the last value).
    """
    _check_q(q)
    return max(0, math.ceil(q * n - 1e-9) - 1)


class Sketch:
    """Quantiles within relative error α; count, sum, mean, min and max exact.

    The quantile ``q`` of ``n`` values is the *nearest-rank* one — the smallest value
    with at least ``q·n`` values ≤ it (0-based rank ``⌈q·n⌉ − 1``; see :func:`nearest_rank`)
    — to within a factor ``1 ± α``.

    Args:
        relative_accuracy: α, in (0, 1).

    Raises:
        ConfigError: ``relative_accuracy`` is not a number in (0, 1).
    """

    __slots__ = ("_buf", "_count", "_dd", "_mapping", "_max", "_min", "_mult", "_sum")

    def __init__(self, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY) -> None:
        alpha = _real(relative_accuracy)
        if alpha is None or not 0.0 < alpha < 1.0:  # (NaN is not)
            raise ConfigError(
                "Sketch relative_accuracy must be a number in (0, 1), "
                f"got {shown(relative_accuracy)}"
            )
        relative_accuracy = alpha
        self._mapping = LogarithmicMapping(relative_accuracy)
        self._mult = _multiplier(relative_accuracy)
        self._dd = DDSketch(relative_accuracy)
        self._buf: list[float] = []
        self._count = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    @property
    def relative_accuracy(self) -> float:
        """α: every quantile is within a factor ``1 ± α`` of the true one."""
        return float(self._mapping.relative_accuracy)

    def add(self, value: float) -> None:
        """Record one value (buffered: an append)."""
        buf = self._buf
        buf.append(value)
        if len(buf) >= FLUSH_AT:
            self._flush()

    def extend(self, values: Sequence[float]) -> None:
        """Record several values (buffered: one ``list.extend``)."""
        buf = self._buf
        buf.extend(values)
        if len(buf) >= FLUSH_AT:
            self._flush()

    def merge(self, other: Sketch) -> None:
        """Fold ``other``'s values into this sketch (both must share α).

        Raises:
            ConfigError: the two sketches' α differ.
        """
        if other.relative_accuracy != self.relative_accuracy:
            raise ConfigError(
                f"cannot merge sketches of relative accuracy {self.relative_accuracy} "
                f"and {other.relative_accuracy}"
            )
        self._flush()
        other._flush()
        self._dd.merge(other._dd)
        self._count += other._count
        self._sum += other._sum
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    @property
    def count(self) -> int:
        """How many values were recorded."""
        return self._count + len(self._buf)

    @property
    def sum(self) -> float:
        """The exact sum of the values."""
        self._flush()
        return self._sum

    @property
    def mean(self) -> float | None:
        """The exact mean, or ``None`` when empty."""
        n = self.count
        return self.sum / n if n else None

    @property
    def min(self) -> float | None:
        """The smallest value, or ``None`` when empty."""
        self._flush()
        return self._min if self._count else None

    @property
    def max(self) -> float | None:
        """The largest value, or ``None`` when empty."""
        self._flush()
        return self._max if self._count else None

    def quantile(self, q: float) -> float | None:
        """The value at quantile ``q`` (0–1) within relative error α; ``None`` when empty.

        The smallest and largest ranks are exact (they are the exact min and max).

        Raises:
            ConfigError: ``q`` is not a number in [0, 1].
        """
        _check_q(q)
        self._flush()
        n = self._count
        if not n:
            return None
        # DDSketch returns the value of 0-based rank ⌊q'·(n − 1)⌋; aim q' at the middle
        # of the nearest rank k so that float rounding cannot move it to k − 1.
        k = nearest_rank(q, n)
        if k == 0:
            return float(self._min)
        if k == n - 1:
            return float(self._max)
        v = self._dd.get_quantile_value(min(1.0, (k + 0.5) / (n - 1)) if n > 1 else 0.0)
        assert v is not None
        return float(min(max(float(v), self._min), self._max))

    def quantiles(self, qs: Iterable[float]) -> dict[str, float | None]:
        """``{quantile_name(q): quantile(q)}`` for each ``q``."""
        return {quantile_name(q): self.quantile(q) for q in qs}

    def _flush(self) -> None:
        buf = self._buf
        if not buf:
            return
        self._count += len(buf)
        self._sum += math.fsum(buf)
        self._min = min(self._min, min(buf))
        self._max = max(self._max, max(buf))
        mapping = self._mapping
        floor = mapping.min_possible
        # LogarithmicMapping.key, inlined: ceil(log2(v) · multiplier) + offset. The
        # multiplier is rebuilt from α with the mapping's own arithmetic (tests check
        # the keys agree); each distinct bin is then added once, with its count, at the
        # bin's representative value (which maps back to the same bin).
        mult = self._mult
        log, ceil = math.log, math.ceil
        keys = Counter([ceil(log(v, 2) * mult) for v in buf if v > floor])
        add, value = self._dd.add, mapping.value
        for key, n in keys.items():
            add(value(key), float(n))
        if sum(keys.values()) < len(buf):
            for v in buf:
                if v <= floor:
                    add(v)  # zeros (and negatives, which the metrics never produce)
        buf.clear()

    def __repr__(self) -> str:
        return (
            f"Sketch(count={self.count}, min={self.min}, max={self.max}, "
            f"p50={self.quantile(0.5)}, relative_accuracy={self.relative_accuracy})"
        )


def _multiplier(relative_accuracy: float) -> float:
    gamma_mantissa = 2 * relative_accuracy / (1 - relative_accuracy)
    mult = 1 / math.log1p(gamma_mantissa)
    mult *= math.log(2)
    return mult
