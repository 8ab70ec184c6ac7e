"""Calibrated token estimates for one session: what budgets and overflow policies count with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentflow.context._calibration import Calibrator, TokenEstimate
from agentflow.context._counting import TokenCounter
from agentflow.context._kinds import KindTally
from agentflow.context._messages import MessageCounter

__all__ = ["SessionEstimates"]


class SessionEstimates:
    """Calibrated token estimates for one session (an overflow view's ``estimator``).

    The whole prompt is counted incrementally (a :class:`PromptCounter` per session, and
    a :class:`KindTally` that splits it by content kind), anchored on the server's count
    of the previous prompt after each turn (:meth:`observe`), and forecast by the
    calibrator per kind with its error margin; :meth:`prompt` is that bound. Parts of a
    prompt (one message, a text) are scaled by the fit's slope alone.

    Args:
        counter: the (shared) message counter.
        calibrator: the (shared) calibrator.
        model: the calibration key.
    """

    __slots__ = ("_calibrator", "_counter", "_model", "_prompt", "_tally", "_text")

    def __init__(self, counter: MessageCounter, calibrator: Calibrator, model: str) -> None:
        self._counter = counter
        self._prompt = counter.session()
        self._tally = KindTally()
        self._text: TokenCounter = counter.counter
        self._calibrator = calibrator
        self._model = model

    def raw_prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> int:
        """The uncalibrated prompt count (incremental: only what changed is counted)."""
        raw = self._prompt.count(messages, tools)
        self._tally.update(self._prompt, messages, self._counter.count_message)
        return raw

    def correct(self, raw: int) -> int:
        """``raw`` corrected by the calibrator's whole-prompt fit (no kinds, no anchor)."""
        return self._calibrator.correct(self._model, raw)

    def forecast(self) -> TokenEstimate:
        """The calibrated forecast of the prompt :meth:`raw_prompt` counted last: per
        content kind, anchored when it can be, with its error margin."""
        return self._calibrator.forecast(self._model, self._tally.shape(self._prompt))

    def prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> int:
        """The calibrated prompt estimate plus its error margin: what must fit."""
        self.raw_prompt(messages, tools)
        return self.forecast().bound

    def observe(self, reported: int | None, forecast: TokenEstimate | None = None) -> None:
        """After the turn: teach the calibrator the server's count of the prompt counted
        last (and what was forecast for it), and anchor the next estimate on it."""
        prompt = self._prompt
        if reported is not None and reported > 0:
            shape = self._tally.shape(prompt)
            self._calibrator.observe(
                self._model, prompt.tokens, reported, shape=shape, forecast=forecast
            )
        prompt.anchor(reported)
        self._tally.anchored()

    def _scale(self, raw: int) -> int:
        # Parts of a prompt scale by the fitted slope alone: the fit's offset is the
        # template's fixed cost, paid once per prompt, not once per message.
        stats = self._calibrator.stats(self._model)
        slope = stats.slope if stats is not None and stats.slope > 0 else 1.0
        return round(raw * slope)

    def message(self, message: Mapping[str, Any]) -> int:
        """One message's estimate, scaled by the calibrated slope."""
        return self._scale(self._counter.count_message(message))

    def text(self, text: str) -> int:
        """A bare text's estimate, scaled by the calibrated slope."""
        return self._scale(self._text.count(text)) if text else 0

    def cut(self, text: str, max_tokens: int) -> str:
        """The longest head of ``text`` within ``max_tokens`` (a guided bisection on chars)."""
        total = self.text(text)
        if total <= max_tokens:
            return text
        if max_tokens <= 0:
            return ""
        lo, hi = 0, len(text)  # text[:lo] fits, text[:hi] does not
        lo_t, hi_t = 0, total
        width = 2 * hi
        while hi - lo > 1:
            if 2 * (hi - lo) > width:
                mid = (lo + hi) // 2  # the last guess did not halve the range: bisect
            else:
                # Interpolate by tokens (a few counts on ordinary text), strictly inside.
                guess = lo + (hi - lo) * (max_tokens - lo_t) // max(1, hi_t - lo_t)
                mid = min(hi - 1, max(lo + 1, guess))
            width = hi - lo
            n = self.text(text[:mid])
            if n <= max_tokens:
                lo, lo_t = mid, n
            else:
                hi, hi_t = mid, n
        return text[:lo]
