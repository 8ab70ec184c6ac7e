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
genuine shift within half a window. The pair slopes are kept as points come and go (a new
point's ``window`` slopes inserted into one sorted list, the oldest's removed), so an
observation costs O(window) list operations instead of window² / 2 divisions, and a
correction none.

:attr:`CalibrationStats.mean_error` and friends report the estimate's relative error
before correction and after it — *out of sample*: each turn's corrected figure is the
prediction made before that turn was observed, so the error is what a budget check
actually suffered.

**Per content kind, with an error margin** (:meth:`Calibrator.forecast`). One ratio is
only right for the mix of text it was learnt on: on SmolLM2 prose costs ~1.0× the cl100k
count, code ~1.25×, JSON ~1.32×, log lines ~1.51×, text in other scripts 1.15–1.37×
(:mod:`agentflow.context._kinds`).
Given a :class:`~agentflow.context.PromptShape` — the prompt's local count split by kind,
and its anchor — the calibrator predicts

    anchored:  reported_previous + Σ ratio[kind] × growth[kind]
    otherwise: Σ ratio[kind] × tokens[kind] + offset

where ``ratio[kind]`` is the median, over the last ``window`` anchored turns whose growth
was mostly that kind, of what the server charged per local token of it (the fitted slope
until a kind has been seen), and ``offset`` the median of what that leaves unexplained
of the whole prompts (the template's fixed text; clipped at 0 for a prompt smaller than
any seen, so that a fit is never extrapolated below the server's count by a negative
offset). It adds a margin derived from the errors it has made, out of sample:

    margin = floor + q[kind] × part

``part`` is the estimated part of the prediction (the growth when anchored, else the whole
prompt), ``kind`` its dominant kind, and ``q[kind]`` the ``quantile`` (nearest rank; 0.95
is the largest of fewer than 20) of that kind's last ``window`` relative errors beyond the
floor, ``(reported − predicted − floor) / part``, at least 0. A kind with fewer than three
errors recorded takes the quantile over all kinds; the part of kinds with no ratio learnt
yet takes ``prior`` instead (all of it, for a model with no turn observed).
:attr:`TokenEstimate.bound` — prediction plus margin — is what a budget compares with its
limit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow.context._calibration_fit import _Model
from agentflow.context._kinds import KINDS, ContentKind, PromptShape

if TYPE_CHECKING:
    from agentflow.context._prompt import PromptCounter

__all__ = ["CalibrationStats", "Calibrator", "TokenEstimate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenEstimate:
    """A prompt's predicted server count and the margin kept for its error
    (:meth:`Calibrator.forecast`).

    Attributes:
        tokens: the predicted ``prompt_tokens``.
        margin: tokens added for estimation error:
            ``floor + q[kind] × part + prior × (tokens of kinds with no learnt ratio)``.
        part: the predicted tokens that were estimated rather than counted by the server
            (the growth since the anchor, or the whole prompt).
        kind: the dominant content kind of that part.
        anchored: whether the prediction started from the server's count of this
            session's previous prompt.
        kind_learnt: whether that kind's ratio had been learnt (else it was estimated
            with the overall slope, and ``prior`` covered it).
    """

    tokens: int
    margin: int
    part: int
    kind: ContentKind
    anchored: bool
    kind_learnt: bool = False

    @property
    def bound(self) -> int:
        """``tokens + margin``: what a budget must leave room for."""
        return self.tokens + self.margin


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
        kind_ratios: the ratio learnt per content kind (kinds seen in anchored growths).
        margins: ``q[kind]`` in force per kind for anchored forecasts (the growth's
            error; see :meth:`Calibrator.forecast`).
        whole_margins: the same for whole-prompt forecasts (no anchor).
        forecasts: turns observed with the :class:`TokenEstimate` used for them.
        under_bound: of those, turns whose ``bound`` was below the server's count.
        max_under: the largest such shortfall relative to ``prompt_tokens`` (0 if none).
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
    kind_ratios: Mapping[str, float] = field(default_factory=dict)
    margins: Mapping[str, float] = field(default_factory=dict)
    whole_margins: Mapping[str, float] = field(default_factory=dict)
    forecasts: int = 0
    under_bound: int = 0
    max_under: float = 0.0


class Calibrator:
    """Learns, per model, the relation between local estimates and the server's
    ``prompt_tokens``, and corrects estimates with it.

    Share one across a fleet: every session of a model teaches the same correction.

    Args:
        window: recent turns the fit uses, per model (≥ 2); also the errors kept per
            content kind for the margin.
        quantile: which of those errors the margin covers, in (0, 1] (nearest rank;
            1 is the largest).
        floor: tokens of margin every estimate gets, whatever its size (template text
            that differs per message or per prompt; ≥ 0).
        prior: the relative margin for the part of a prompt whose kinds have no ratio
            learnt yet (all of it, for a model with no turn observed); ≥ 0.

    Raises:
        ConfigError: a value out of its range (the message names it).
    """

    def __init__(
        self, *, window: int = 32, quantile: float = 0.95, floor: int = 32, prior: float = 0.5
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise ConfigError(f"Calibrator.window must be an int >= 2, got {window!r}")
        if isinstance(quantile, bool) or not isinstance(quantile, int | float):
            raise ConfigError(f"Calibrator.quantile must be a number, got {quantile!r}")
        if not 0 < quantile <= 1:
            raise ConfigError(f"Calibrator.quantile must be in (0, 1], got {quantile!r}")
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
            raise ConfigError(f"Calibrator.floor must be an int >= 0, got {floor!r}")
        if isinstance(prior, bool) or not isinstance(prior, int | float) or not 0 <= prior < 10:
            raise ConfigError(f"Calibrator.prior must be a number in [0, 10), got {prior!r}")
        self.window = window
        self.quantile = float(quantile)
        self.floor = floor
        self.prior = float(prior)
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

    def forecast(self, model: str, shape: PromptShape) -> TokenEstimate:
        """The predicted server count of a prompt of this ``shape``, per content kind,
        with its error margin (see the module's docstring).

        Args:
            model: the model the calibration is kept under.
            shape: the prompt's local count by kind, and its anchor (from
                :class:`~agentflow.context.KindTally`, or built by hand).
        """
        m = self._models.get(model)
        anchored = shape.anchor is not None
        counts = shape.growth if anchored else shape.kinds
        k = max(range(len(KINDS)), key=counts.__getitem__) if any(counts) else 0
        unknown: float
        if m is None:
            # Nothing learnt: the growth (else the whole prompt) as counted here, on top
            # of the server's count of the anchored prompt. (A resumed session anchors
            # before its calibrator saw a turn: the anchored prompt was left out, and a
            # prompt over the window went out.)
            part = sum(counts)
            unknown = part
            tokens = part + (shape.anchor[1] if shape.anchor else 0)
            q, learnt = 0.0, False
        else:
            est = 0.0
            unknown = 0.0
            for j, n in enumerate(counts):
                r = m.ratio(j)
                est += r * n
                if m.kind_ratios[j] is None:
                    unknown += r * n
            if shape.anchor is not None:
                part = max(0, round(est))
                tokens = shape.anchor[1] + part
            else:
                part = tokens = max(0, round(est + m.offset_for(shape.system)))
            q = m.quantile(k, anchored, self.quantile)
            learnt = m.kind_ratios[k] is not None
        margin = self.floor + math.ceil(q * max(0.0, part - unknown) + self.prior * unknown)
        return TokenEstimate(
            tokens=max(0, tokens),
            margin=margin,
            part=part,
            kind=KINDS[k],
            anchored=anchored,
            kind_learnt=learnt,
        )

    def observe(
        self,
        model: str,
        estimate: int,
        reported: int | None,
        *,
        predicted: int | None = None,
        shape: PromptShape | None = None,
        forecast: TokenEstimate | None = None,
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
                ``forecast``'s tokens, else the :meth:`correct` of ``estimate`` as it
                stood before this turn.
            shape: the prompt's :class:`PromptShape`: teaches the per-kind ratios and,
                with the ``forecast`` made for it, the per-kind error margins.
            forecast: what :meth:`forecast` said of this prompt before it was sent; by
                default (with a ``shape``) what it says now, before learning this turn.
        """
        if reported is None or reported <= 0 or estimate <= 0:
            return
        if shape is not None and forecast is None:
            forecast = self.forecast(model, shape)
        m = self._models.get(model)
        if m is None:
            m = self._models[model] = _Model(self.window)
        raw = abs(estimate - reported) / reported
        if predicted is None and forecast is not None:
            predicted = forecast.tokens
        if predicted is None:
            predicted = m.predict(estimate) if m.n else estimate
        corrected = abs(predicted - reported) / reported
        m.n += 1
        m.sum_raw += raw
        m.max_raw = max(m.max_raw, raw)
        m.sum_corrected += corrected
        m.max_corrected = max(m.max_corrected, corrected)
        m.recent.append(corrected)
        m.add_point(estimate, reported)
        if forecast is not None:
            m.forecasts += 1
            if forecast.bound < reported:
                m.under_bound += 1
                m.max_under = max(m.max_under, (reported - forecast.bound) / reported)
            if forecast.kind_learnt:  # an unlearnt kind's error is the prior's business
                error = (reported - forecast.tokens - self.floor) / max(1, forecast.part)
                m.errors[forecast.anchored][KINDS.index(forecast.kind)].append(error)
        if shape is not None:
            m.learn_kind(shape, reported)
        m.fit()

    def slope(self, model: str) -> float:
        """The fitted slope for ``model`` (1.0 before its first observed turn): what a
        part of a prompt — a message, a text — scales by. O(1), unlike :meth:`stats`."""
        m = self._models.get(model)
        return m.slope if m is not None and m.slope > 0 else 1.0

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
            kind_ratios={k: r for k, r in zip(KINDS, m.kind_ratios, strict=True) if r is not None},
            margins={k: m.quantile(i, True, self.quantile) for i, k in enumerate(KINDS)},
            whole_margins={k: m.quantile(i, False, self.quantile) for i, k in enumerate(KINDS)},
            forecasts=m.forecasts,
            under_bound=m.under_bound,
            max_under=m.max_under,
        )

    def to_state(self) -> dict[str, Any]:
        """What was learnt, per model, as JSON-able values: the fit's window of points,
        the per-kind ratios, shapes and errors, and the error statistics.
        :meth:`load_state` restores it (a run store saves it, and ``Fleet.resume``
        restores it, so a resumed run's estimates continue where they were)."""
        return {
            "version": 1,
            "models": {name: m.state() for name, m in self._models.items()},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Replace what this calibrator learnt with ``state`` (from :meth:`to_state`).

        Its own settings (``window``, ``quantile``, ``floor``, ``prior``) stay; with the
        same ``window`` every estimate afterwards is the one the saved calibrator would
        have made (a smaller window keeps the newest points).

        Raises:
            ConfigError: ``state`` is not a state :meth:`to_state` returned.
        """
        try:
            if state.get("version") != 1:
                raise ValueError(f"version {state.get('version')!r}, expected 1")
            models = {
                str(name): _Model.restored(self.window, dict(m))
                for name, m in dict(state["models"]).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            raise ConfigError(f"Calibrator.load_state: not a calibrator state ({exc})") from exc
        self._models = models

    @property
    def models(self) -> list[str]:
        """The models observed so far, in order of first observation."""
        return list(self._models)

    def __repr__(self) -> str:
        return (
            f"Calibrator(window={self.window}, quantile={self.quantile}, floor={self.floor}, "
            f"prior={self.prior}, models={self.models})"
        )
