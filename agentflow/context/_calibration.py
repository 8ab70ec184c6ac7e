"""Calibration: learn how the server's prompt count relates to the local estimate.

A local estimate (tiktoken's ``cl100k_base`` plus OpenAI's template overhead) is off
for any model with another tokenizer or chat template in two ways: a *ratio* (SmolLM2's
BPE splits text into ~1.1× more tokens than cl100k does) and an *offset* (a template's
fixed text — llama.cpp adds SmolLM2's default system prompt, ~30 tokens, whenever the
messages carry none). So the :class:`Calibrator` fits, per model,

    reported ≈ slope × estimate + offset

over the last ``window`` turns, with the Theil–Sen estimator: the slope is the median of
the slopes between pairs of turns (pairs whose estimates differ by at least a tenth, so
that close pairs do not divide noise by noise), the offset the median of
``reported - slope × estimate``. Until the window holds such pairs it falls back to
a pure ratio, the median of ``reported / estimate``.

Why medians rather than an exponentially weighted mean: one odd turn (a server that
counted a truncated prompt, a multimodal message, a template branch taken once) would
pull an EWMA by its full weight and keep it pulled for many turns; a median over a
sliding window ignores it outright, needs no decay constant, and still follows a
genuine shift within half a window. The fit costs O(window²) (≈ 0.1 ms at 32) once per
observation, none per correction.

:attr:`CalibrationStats.mean_error` and friends report the estimate's relative error
before correction and after it — *out of sample*: each turn's corrected figure is the
prediction made before that turn was observed, so the error is what a budget check
actually suffered.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentflow._errors import ConfigError

if TYPE_CHECKING:
    from agentflow.context._prompt import PromptCounter

__all__ = ["CalibrationStats", "Calibrator"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationStats:
    """How good one model's estimates were, and the correction in force.

    Attributes:
        model: the model name.
        samples: turns observed.
        slope, offset: the correction ``slope × estimate + offset``.
        mean_raw_error, max_raw_error: relative error ``|estimate − reported| / reported``
            of the uncorrected estimates, over all samples.
        mean_error, max_error: the same for the corrected estimates, each made before
            its turn was observed (the first turn, with nothing learnt, is uncorrected).
        recent_error: the corrected estimates' mean relative error over the last
            ``window`` turns — what to expect now.
    """

    model: str
    samples: int
    slope: float
    offset: float
    mean_raw_error: float
    max_raw_error: float
    mean_error: float
    max_error: float
    recent_error: float


class _Model:
    __slots__ = (
        "max_corrected",
        "max_raw",
        "n",
        "offset",
        "points",
        "recent",
        "slope",
        "sum_corrected",
        "sum_raw",
    )

    def __init__(self, window: int) -> None:
        self.points: deque[tuple[int, int]] = deque(maxlen=window)
        self.recent: deque[float] = deque(maxlen=window)
        self.slope = 1.0
        self.offset = 0.0
        self.n = 0
        self.sum_raw = self.max_raw = 0.0
        self.sum_corrected = self.max_corrected = 0.0

    def predict(self, estimate: int) -> int:
        return max(0, round(self.slope * estimate + self.offset))

    def fit(self) -> None:
        pts = list(self.points)
        slopes = [
            (r2 - r1) / (e2 - e1)
            for i, (e1, r1) in enumerate(pts)
            for e2, r2 in pts[i + 1 :]
            if abs(e2 - e1) >= 0.1 * max(e1, e2)
        ]
        if len(slopes) >= 3:
            self.slope = statistics.median(slopes)
            self.offset = statistics.median(r - self.slope * e for e, r in pts)
        else:
            self.slope = statistics.median(r / e for e, r in pts)
            self.offset = 0.0


class Calibrator:
    """Learns, per model, the relation between local estimates and the server's
    ``prompt_tokens``, and corrects estimates with it.

    Share one across a fleet: every session of a model teaches the same correction.

    Args:
        window: recent turns the fit uses, per model (≥ 2).

    Raises:
        ConfigError: ``window`` below 2.
    """

    def __init__(self, *, window: int = 32) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise ConfigError(f"Calibrator.window must be an int >= 2, got {window!r}")
        self.window = window
        self._models: dict[str, _Model] = {}

    def correct(self, model: str, estimate: int) -> int:
        """``estimate`` corrected for ``model``; unchanged until a turn was observed."""
        m = self._models.get(model)
        return estimate if m is None else m.predict(estimate)

    def estimate(self, model: str, prompt: PromptCounter) -> int:
        """The corrected estimate of the prompt ``prompt`` counted last.

        With an anchor (:meth:`PromptCounter.anchor` — the server's count of this
        session's previous prompt, every message of which is still unchanged), it is
        that count plus the growth since, scaled by the learnt slope: only the new
        messages are estimated. Otherwise, :meth:`correct` of the whole count.
        """
        point = prompt.anchor_point
        if point is None:
            return self.correct(model, prompt.tokens)
        raw, reported = point
        m = self._models.get(model)
        slope = 1.0 if m is None else m.slope
        return max(0, reported + round(slope * (prompt.tokens - raw)))

    def observe(
        self, model: str, estimate: int, reported: int | None, *, predicted: int | None = None
    ) -> None:
        """Learn from one turn: the raw local ``estimate`` of its prompt and the
        server's reported ``prompt_tokens``. Turns without a report, or with a
        non-positive figure on either side, are ignored.

        Args:
            model: the model name the correction is kept under.
            estimate: the uncorrected local count of the prompt sent.
            reported: the server's ``usage.prompt_tokens`` for it.
            predicted: the corrected estimate actually used for this turn (from
                :meth:`estimate`), for the error statistics; by default the
                :meth:`correct` of ``estimate`` as it stood before this turn.
        """
        if reported is None or reported <= 0 or estimate <= 0:
            return
        m = self._models.get(model)
        if m is None:
            m = self._models[model] = _Model(self.window)
        raw = abs(estimate - reported) / reported
        if predicted is None:
            predicted = m.predict(estimate) if m.n else estimate
        corrected = abs(predicted - reported) / reported
        m.n += 1
        m.sum_raw += raw
        m.max_raw = max(m.max_raw, raw)
        m.sum_corrected += corrected
        m.max_corrected = max(m.max_corrected, corrected)
        m.recent.append(corrected)
        m.points.append((estimate, reported))
        m.fit()

    def stats(self, model: str) -> CalibrationStats | None:
        """What was learnt for ``model``, or ``None`` before its first observed turn."""
        m = self._models.get(model)
        if m is None:
            return None
        return CalibrationStats(
            model=model,
            samples=m.n,
            slope=m.slope,
            offset=m.offset,
            mean_raw_error=m.sum_raw / m.n,
            max_raw_error=m.max_raw,
            mean_error=m.sum_corrected / m.n,
            max_error=m.max_corrected,
            recent_error=statistics.fmean(m.recent),
        )

    @property
    def models(self) -> list[str]:
        """The models observed so far, in order of first observation."""
        return list(self._models)

    def __repr__(self) -> str:
        return f"Calibrator(window={self.window}, models={self.models})"
