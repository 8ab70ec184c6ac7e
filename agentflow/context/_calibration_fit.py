"""One model's calibration state: the sliding window of (estimate, reported) points, the
Theil–Sen fit over it kept incrementally, the per-kind ratios and offsets, and the errors
the margin is drawn from. :class:`~agentflow.context.Calibrator` keeps one per model and
explains the method (``_calibration.py``).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque
from collections.abc import Sequence
from operator import mul
from typing import Any

from agentflow.context._kinds import KINDS, PromptShape

__all__: list[str] = []

#: Errors a kind needs before its own quantile is trusted.
_MIN_ERRORS = 3
#: Local tokens an anchored growth needs to teach its kind's ratio (template noise below).
_MIN_GROWTH = 16
#: Share of a growth its dominant kind needs for the growth to teach that kind's ratio.
_DOMINANT = 0.6


class _Model:
    __slots__ = (
        "base_ratio",
        "errors",
        "forecasts",
        "kind_offsets",
        "kind_ratios",
        "max_corrected",
        "max_raw",
        "max_under",
        "n",
        "offset",
        "pair_rows",
        "points",
        "ratios",
        "recent",
        "shapes",
        "slope",
        "slopes",
        "sum_corrected",
        "sum_raw",
        "under_bound",
    )

    def __init__(self, window: int) -> None:
        self.points: deque[tuple[int, int]] = deque(maxlen=window)
        # Theil–Sen's pair slopes, kept as points come and go rather than recomputed
        # (window² / 2 divisions per turn): per point, its slope with each point before
        # it (None for a pair too close to give one), and every slope, sorted.
        self.pair_rows: deque[deque[float | None]] = deque()
        self.slopes: list[float] = []
        self.recent: deque[float] = deque(maxlen=window)
        self.slope = 1.0
        self.offset = 0.0
        self.n = 0
        self.sum_raw = self.max_raw = 0.0
        self.sum_corrected = self.max_corrected = 0.0
        # Per kind: ratios learnt from anchored growths; relative errors beyond the floor,
        # of whole-prompt forecasts (first row) and of anchored ones (second row).
        self.ratios: list[deque[float]] = [deque(maxlen=window) for _ in KINDS]
        self.errors: tuple[list[deque[float]], list[deque[float]]] = (
            [deque(maxlen=window) for _ in KINDS],
            [deque(maxlen=window) for _ in KINDS],
        )
        self.shapes: deque[tuple[int, tuple[int, ...], bool]] = deque(maxlen=window)
        self.kind_ratios: list[float | None] = [None] * len(KINDS)
        self.base_ratio = 1.0
        # The template's fixed text, for prompts without a system message and with one.
        self.kind_offsets: list[float | None] = [None, None]
        self.forecasts = self.under_bound = 0
        self.max_under = 0.0

    def state(self) -> dict[str, Any]:
        """What was learnt, as plain JSON-able values (:meth:`restored` rebuilds it)."""
        return {
            "points": [list(p) for p in self.points],
            "recent": list(self.recent),
            "n": self.n,
            "sum_raw": self.sum_raw,
            "max_raw": self.max_raw,
            "sum_corrected": self.sum_corrected,
            "max_corrected": self.max_corrected,
            "ratios": [list(r) for r in self.ratios],
            "errors": [[list(e) for e in row] for row in self.errors],
            "shapes": [[rep, list(kinds), system] for rep, kinds, system in self.shapes],
            "forecasts": self.forecasts,
            "under_bound": self.under_bound,
            "max_under": self.max_under,
        }

    @classmethod
    def restored(cls, window: int, state: dict[str, Any]) -> _Model:
        """A model in the ``state`` :meth:`state` returned: its points are added again in
        order (rebuilding the pair slopes) and the fit is redone, so every derived figure
        is what it was. Raises ``KeyError``/``TypeError``/``ValueError`` on a bad state."""
        m = cls(window)
        for e, r in state["points"]:
            if not (int(e) > 0 and int(r) > 0):  # observe() learns from no other point
                raise ValueError(f"a point ({e!r}, {r!r}) is not two counts > 0")
            m.add_point(int(e), int(r))
        m.recent.extend(float(x) for x in state["recent"])
        m.n = int(state["n"])
        m.sum_raw, m.max_raw = float(state["sum_raw"]), float(state["max_raw"])
        m.sum_corrected = float(state["sum_corrected"])
        m.max_corrected = float(state["max_corrected"])
        # Kinds are only ever added at the end: a state saved before one was added has
        # learnt nothing of it.
        n = len(state["ratios"])
        errors = state["errors"]
        if not 0 < n <= len(KINDS) or len(errors) != 2 or any(len(r) != n for r in errors):
            raise ValueError("the state's content kinds differ from this agentflow's")
        for dq, xs in zip(m.ratios, state["ratios"], strict=False):
            dq.extend(float(x) for x in xs)
        for row, saved in zip(m.errors, errors, strict=True):
            for dq, xs in zip(row, saved, strict=False):
                dq.extend(float(x) for x in xs)
        pad = (0,) * (len(KINDS) - n)
        for rep, kinds, system in state["shapes"]:
            if len(kinds) != n:
                raise ValueError("a shape's content kinds differ from the state's")
            m.shapes.append((int(rep), (*(int(k) for k in kinds), *pad), bool(system)))
        m.forecasts, m.under_bound = int(state["forecasts"]), int(state["under_bound"])
        m.max_under = float(state["max_under"])
        if not m.points:
            raise ValueError("a model's state has no points")
        m.fit()
        return m

    def predict(self, estimate: int) -> int:
        fit = self.slope * estimate + self.offset
        lo = min(e for e, _ in self.points)
        if estimate < lo and self.offset < 0:
            # Below every prompt seen, a negative offset would be extrapolated past the
            # point where it was measured: scale the smallest prompt's fit instead.
            fit = max(fit, (self.slope * lo + self.offset) * estimate / lo)
        return max(0, round(fit))

    def ratio(self, k: int) -> float:
        r = self.kind_ratios[k]
        return self.base_ratio if r is None else r

    def offset_for(self, system: bool) -> float:
        offset = self.kind_offsets[system]
        if offset is None:
            offset = self.kind_offsets[not system]
        # A template's fixed text is not negative (beyond the ~3 tokens of reply priming
        # the local count assumes); a negative median is the per-kind ratios' spread
        # (±10% within a kind) over large prompts, and applied to a small prompt it
        # would predict a fraction of it.
        return 0.0 if offset is None else max(0.0, offset)

    def add_point(self, estimate: int, reported: int) -> None:
        """A turn's (estimate, reported) joins the fit's window (the oldest leaves)."""
        pts, rows, slopes = self.points, self.pair_rows, self.slopes
        if len(pts) == pts.maxlen:
            pts.popleft()
            rows.popleft()  # the oldest point's own row is empty by now
            for later in rows:  # each later row begins with its slope to the oldest point
                gone = later.popleft()
                if gone is not None:
                    del slopes[bisect.bisect_left(slopes, gone)]
        e2, r2 = estimate, reported
        row: deque[float | None] = deque()
        for e1, r1 in pts:
            if abs(e2 - e1) >= 0.1 * max(e1, e2):
                slope = (r2 - r1) / (e2 - e1)
                bisect.insort(slopes, slope)
                row.append(slope)
            else:
                row.append(None)
        pts.append((estimate, reported))
        rows.append(row)

    def fit(self) -> None:
        pts = list(self.points)
        slopes = self.slopes  # sorted: the median is read off, as statistics.median would
        if len(slopes) >= 3:
            mid = len(slopes) // 2
            self.slope = slopes[mid] if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2
            self.offset = statistics.median(r - self.slope * e for e, r in pts)
        else:
            self.slope = statistics.median(r / e for e, r in pts)
            self.offset = 0.0
        self.base_ratio = statistics.median(r / e for e, r in pts)
        self.kind_ratios = [statistics.median(r) if r else None for r in self.ratios]
        ratios = [self.ratio(k) for k in range(len(KINDS))]
        for system in (False, True):
            rests = [  # map(mul, …): the sum of products in C, once per shape and turn
                rep - sum(map(mul, ratios, kinds))
                for rep, kinds, sys in self.shapes
                if sys == system
            ]
            self.kind_offsets[system] = statistics.median(rests) if rests else None

    def learn_kind(self, shape: PromptShape, reported: int) -> None:
        """An anchored growth mostly of one kind teaches that kind's ratio."""
        self.shapes.append((reported, shape.kinds, shape.system))
        if shape.anchor is None:
            return
        growth = shape.growth
        total = sum(growth)
        if total < _MIN_GROWTH:
            return
        k = max(range(len(KINDS)), key=growth.__getitem__)
        if growth[k] < _DOMINANT * total:
            return
        others = sum(self.ratio(j) * n for j, n in enumerate(growth) if j != k)
        r = (reported - shape.anchor[1] - others) / growth[k]
        if 0 < r < 10:  # a wild report (a truncated prompt, say) teaches nothing
            self.ratios[k].append(r)

    def quantile(self, k: int, anchored: bool, q: float) -> float:
        row = self.errors[anchored]
        if len(row[k]) >= _MIN_ERRORS:
            return max(0.0, _quantile(row[k], q))
        pooled = [e for errs in row for e in errs]
        if not pooled:  # no forecast of this sort checked yet: the other sort's errors
            pooled = [e for errs in self.errors[not anchored] for e in errs]
        return max(0.0, _quantile(pooled, q)) if pooled else 0.0


def _quantile(values: Sequence[float] | deque[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (the largest value for ``q`` = 1)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
