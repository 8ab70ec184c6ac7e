"""Sums over time in fixed-width buckets, in O(1) per interval and bounded memory.

Throughput over time is a sum per bucket: output tokens, prompt tokens, request-seconds
in flight. A turn's output tokens arrive over its decode phase, so :meth:`TimeSeries.spread`
spreads an amount uniformly over an interval: the two partial end buckets get their share
directly and the full buckets in between through a difference array (one addition at
each end), so a ten-minute turn costs what a ten-millisecond one does.

Buckets are aligned on ``anchor + k·width`` of the trace clock. When a run outlasts
``max_buckets`` buckets, the width doubles and neighbouring buckets are added together,
so memory stays bounded for any run length while sums stay exact.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["TimeSeries"]


class TimeSeries:
    """Named sums per time bucket.

    Args:
        names: the series kept (more can be added with :meth:`ensure`).
        bucket_ns: initial bucket width, nanoseconds of the trace clock.
        anchor_ns: buckets start at ``anchor_ns + k·width`` (the run's start, when known).
        max_buckets: when more would be needed, the width doubles.
    """

    __slots__ = ("_base", "_df", "_n", "_pt", "anchor_ns", "bucket_ns", "max_buckets", "width_ns")

    def __init__(
        self,
        names: Iterable[str],
        *,
        bucket_ns: int = 1_000_000_000,
        anchor_ns: int = 0,
        max_buckets: int = 2048,
    ) -> None:
        if bucket_ns < 1 or max_buckets < 2:
            raise ValueError("bucket_ns must be ≥ 1 and max_buckets ≥ 2")
        #: The initial bucket width; merging needs it equal on both sides.
        self.bucket_ns = bucket_ns
        #: The current bucket width (``bucket_ns · 2^k``).
        self.width_ns = bucket_ns
        self.anchor_ns = anchor_ns
        self.max_buckets = max_buckets
        self._base: int | None = None  # bucket index of the first list entry
        self._n = 0  # buckets
        self._pt: dict[str, list[float]] = {}  # amounts added to one bucket
        self._df: dict[str, list[float]] = {}  # difference array of per-bucket amounts
        for name in names:
            self.ensure(name)

    def ensure(self, name: str) -> None:
        """Start keeping series ``name`` (all zeros so far)."""
        if name not in self._pt:
            n = self._n
            self._pt[name] = [0.0] * n
            self._df[name] = [0.0] * (n + 1)

    @property
    def names(self) -> list[str]:
        """The series kept."""
        return list(self._pt)

    def __len__(self) -> int:
        return self._n

    @property
    def start_ns(self) -> int | None:
        """Where the first bucket starts on the trace clock, or ``None`` when empty."""
        return None if self._base is None else self.anchor_ns + self._base * self.width_ns

    def add(self, name: str, t_ns: int, amount: float) -> None:
        """Add ``amount`` to the bucket holding ``t_ns``."""
        self.add_many(t_ns, ((name, amount),))

    def add_many(self, t_ns: int, items: Iterable[tuple[str, float]]) -> None:
        """Add each ``(name, amount)`` to the bucket holding ``t_ns``."""
        k, _ = self._locate(t_ns, t_ns)
        pt = self._pt
        for name, amount in items:
            pt[name][k] += amount

    def spread(self, name: str, start_ns: int, end_ns: int, amount: float) -> None:
        """Add ``amount`` spread uniformly over ``[start_ns, end_ns)``.

        An empty or reversed interval puts it all in the bucket holding ``start_ns``.
        """
        self.spread_many(start_ns, end_ns, ((name, amount),))

    def spread_many(self, start_ns: int, end_ns: int, items: Iterable[tuple[str, float]]) -> None:
        """:meth:`spread` each ``(name, amount)`` over the same interval."""
        if end_ns <= start_ns:
            self.add_many(start_ns, items)
            return
        k0, k1 = self._locate(start_ns, end_ns - 1)
        pt = self._pt
        if k0 == k1:
            for name, amount in items:
                pt[name][k0] += amount
            return
        w = self.width_ns
        edge0 = self.anchor_ns + (self._base + k0 + 1) * w  # type: ignore[operator]
        head, tail, span = edge0 - start_ns, end_ns - (edge0 + (k1 - k0 - 1) * w), end_ns - start_ns
        df = self._df
        for name, amount in items:
            rate = amount / span
            p = pt[name]
            p[k0] += rate * head
            p[k1] += rate * tail
            if k1 - k0 > 1:
                d, full = df[name], rate * w
                d[k0 + 1] += full
                d[k1] -= full

    def _locate(self, lo_ns: int, hi_ns: int) -> tuple[int, int]:
        """List offsets of the buckets holding ``lo_ns`` and ``hi_ns``, made to exist."""
        a, w, base = self.anchor_ns, self.width_ns, self._base
        i0, i1 = (lo_ns - a) // w, (hi_ns - a) // w
        if base is None or i0 < base or i1 >= base + self._n:
            self._cover(i0, i1)
            w, base = self.width_ns, self._base
            assert base is not None
            i0, i1 = (lo_ns - a) // w, (hi_ns - a) // w
        return i0 - base, i1 - base

    def values(self, name: str) -> list[float]:
        """Series ``name``, one sum per bucket from :attr:`start_ns` on."""
        pt, df = self._pt[name], self._df[name]
        out, run = [], 0.0
        for p, d in zip(pt, df, strict=False):
            run += d
            out.append(p + run)
        return out

    def merge(self, other: TimeSeries) -> None:
        """Add ``other``'s sums into this one (same anchor and initial width)."""
        if (other.anchor_ns, other.bucket_ns) != (self.anchor_ns, self.bucket_ns):
            raise ValueError("time series merge needs the same anchor_ns and bucket_ns")
        for name in other._pt:
            self.ensure(name)
        start = other.start_ns
        if start is None:
            return
        width = other.width_ns
        theirs = {name: other.values(name) for name in other._pt}
        while True:
            while self.width_ns < width:
                self._coarsen()
            while width < self.width_ns:
                start, theirs = _halve(start, width, self.anchor_ns, theirs)
                width *= 2
            first = (start - self.anchor_ns) // width
            self._cover(first, first + len(next(iter(theirs.values()))) - 1)
            if self.width_ns == width:  # else making room coarsened us: fold again
                break
        base = self._base
        assert base is not None
        for name, vals in theirs.items():
            pt = self._pt[name]
            for k, v in enumerate(vals):
                pt[first + k - base] += v

    def _cover(self, lo: int, hi: int) -> None:
        """Make buckets ``lo..hi`` exist, coarsening while there would be too many."""
        base = self._base
        if base is None:
            while hi - lo + 1 > self.max_buckets:
                self.width_ns *= 2
                lo, hi = lo // 2, hi // 2
            self._base, self._n = lo, hi - lo + 1
            for name in self._pt:
                self._pt[name] = [0.0] * (hi - lo + 1)
                self._df[name] = [0.0] * (hi - lo + 2)
            return
        n = self._n
        if lo >= base and hi < base + n:
            return
        new_lo, new_hi = min(lo, base), max(hi, base + n - 1)
        while new_hi - new_lo + 1 > self.max_buckets:
            self._coarsen()
            lo, hi, new_lo, new_hi = lo // 2, hi // 2, new_lo // 2, new_hi // 2
            base, n = self._base, self._n
            assert base is not None
        left, right = base - new_lo, new_hi - (base + n - 1)
        if left or right:
            for name in self._pt:
                self._pt[name] = [0.0] * left + self._pt[name] + [0.0] * right
                df = self._df[name]
                self._df[name] = [0.0] * left + df + [0.0] * right
            self._base, self._n = new_lo, new_hi - new_lo + 1

    def _coarsen(self) -> None:
        """Double the width: add neighbouring buckets together."""
        base = self._base
        if base is None:
            self.width_ns *= 2
            return
        start = self.anchor_ns + base * self.width_ns
        values = {name: self.values(name) for name in self._pt}
        start, values = _halve(start, self.width_ns, self.anchor_ns, values)
        self.width_ns *= 2
        self._base = base // 2
        self._n = (base + self._n - 1) // 2 - base // 2 + 1
        for name, vals in values.items():
            self._pt[name] = vals
            self._df[name] = [0.0] * (len(vals) + 1)


def _halve(
    start: int, width: int, anchor: int, values: dict[str, list[float]]
) -> tuple[int, dict[str, list[float]]]:
    """Fold buckets of ``width`` starting at ``start`` into buckets of ``2·width``."""
    first = (start - anchor) // width
    new_first = first // 2
    out: dict[str, list[float]] = {}
    for name, vals in values.items():
        n = (first + len(vals) - 1) // 2 - new_first + 1
        folded = [0.0] * n
        for k, v in enumerate(vals):
            folded[(first + k) // 2 - new_first] += v
        out[name] = folded
    return anchor + new_first * 2 * width, out
