"""Calibrated token estimates for one session: what budgets and overflow policies count with."""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any, Final

from agentflow.context._calibration import Calibrator, TokenEstimate
from agentflow.context._counting import TiktokenCounter, TokenCounter
from agentflow.context._kinds import KindTally
from agentflow.context._messages import MessageCounter
from agentflow.context._prompt import PromptCounter

__all__ = ["SessionEstimates"]

#: A tool output longer than this many tokens has its first ids kept, packed (4 bytes
#: each), for a cut to start from without tokenizing a head of it; the most kept per
#: session (the oldest go first; a cut takes its output's).
_HEAD_IDS: Final = 1024
_HEADS_KEPT: Final = 64


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

    __slots__ = (
        "_calibrator",
        "_counter",
        "_heads",
        "_last",
        "_model",
        "_prompt",
        "_role_ids",
        "_tally",
        "_text",
    )

    def __init__(self, counter: MessageCounter, calibrator: Calibrator, model: str) -> None:
        self._counter = counter
        self._prompt = counter.session()
        self._tally = KindTally()
        self._text: TokenCounter = counter.counter
        self._calibrator = calibrator
        self._model = model
        self._last: tuple[str, int] = ("", 0)  # the text counted last, and its count
        #: By the hash of a long tool output (never the text: it is not kept alive), its
        #: first ids as its count made them — tiktoken only (see :meth:`cut`).
        self._heads: OrderedDict[int, array[int]] | None = (
            OrderedDict() if type(self._text) is TiktokenCounter else None
        )
        self._role_ids = 0

    @property
    def counter(self) -> PromptCounter:
        """The session's :class:`PromptCounter` (the one :meth:`raw_prompt` counts with)."""
        return self._prompt

    def raw_prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> int:
        """The uncalibrated prompt count (incremental: only what changed is counted)."""
        raw = self._prompt.count(messages, tools)
        self._tally.update(self._prompt, messages, self.raw_message)
        if self._heads is not None:
            self._keep_heads(messages[self._prompt.first_changed :])
        return raw

    def _keep_heads(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Keep the first ids of the long tool outputs among ``messages``, just counted,
        whose ids the counter still holds (a lookup: nothing is tokenized for it)."""
        heads = self._heads
        assert heads is not None
        counter = self._counter
        for m in messages:
            content = m.get("content")
            if m.get("role") != "tool" or type(content) is not str:
                continue
            if self.raw_message(m) <= 2 * _HEAD_IDS or hash(content) in heads:
                continue
            ids = counter.recent(m)
            if ids is None:
                continue
            if not self._role_ids:
                self._role_ids = counter.per_message + len(self._text.encode("tool"))
            at = self._role_ids  # the content's ids follow the overhead and the role's
            with suppress(OverflowError):
                heads[hash(content)] = array("i", ids[at : at + _HEAD_IDS])
            while len(heads) > _HEADS_KEPT:
                heads.popitem(last=False)

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
        self.anchor(reported)

    def anchor(self, reported: int | None) -> None:
        """Anchor the next estimate on the server's count of the prompt counted last,
        teaching the calibrator nothing (a resumed session's last recorded prompt: the
        calibrator, restored, learnt it when the turn ran)."""
        self._prompt.anchor(reported)
        self._tally.anchored()

    def _scale(self, raw: int) -> int:
        # Parts of a prompt scale by the fitted slope alone: the fit's offset is the
        # template's fixed cost, paid once per prompt, not once per message.
        return round(raw * self._calibrator.slope(self._model))

    def raw_message(self, message: Mapping[str, Any]) -> int:
        """One message's uncalibrated count: the session's own, kept by its
        :class:`PromptCounter`, for a message of the history last counted (no lookup in
        the counter's cache shared by every session, which may have evicted it); else
        the shared counter's."""
        n = self._prompt.count_of(message)
        return n if n is not None else self._counter.count_message(message)

    def message(self, message: Mapping[str, Any]) -> int:
        """One message's estimate, scaled by the calibrated slope (its count is the
        session's own for a message of the history: no tokenizing)."""
        return self._scale(self.raw_message(message))

    def text(self, text: str) -> int:
        """A bare text's estimate, scaled by the calibrated slope."""
        return self._scale(self._raw(text))

    def _raw(self, text: str) -> int:
        if not text:
            return 0
        last, raw = self._last
        if text != last:  # else it is the head :meth:`cut` found, asked for again
            raw = self._text.count(text)
            self._last = (text, raw)
        return raw

    def cut(self, text: str, max_tokens: int) -> str:
        """The longest head of ``text`` within ``max_tokens`` (for counts that grow with
        the text, as on any ordinary text; a long run of one character may tokenize into
        fewer tokens when longer, and then the head found is one that fits and that one
        character more would not).

        Only heads are tokenized, never the whole text. With a counter that offers
        ``head_length`` (both shipped ones do), the first ``max_tokens`` tokens' end is
        the guess, and two counts confirm it (it fits; one character more does not).
        A counter that also offers ``head_split`` (tiktoken) says where before the guess
        the text splits into parts tokenized alone, and how many tokens come before
        that point: every count then tokenizes only the few characters after it.
        Otherwise, or when the guess misses, prefixes twice as long each time until one
        is over, then a guided bisection between the last two — so cutting a 20k-token
        tool output to 512 tokens costs a few 512-token counts, not its length. The
        head's count is kept: :meth:`text` of it right after costs nothing.
        """
        if max_tokens <= 0:
            return ""
        size = len(text)
        scale = self._scale
        lo, lo_raw = 0, 0  # text[:lo] fits, with lo_raw raw tokens
        hi = min(size, 5 * max_tokens + 16)  # ~4 characters a token in English
        # text[:x] has skip + count(text[base:x]) tokens for x >= base: a counter that
        # knows where the text splits into pieces tokenized alone (tiktoken) says so,
        # and the counts below tokenize only what follows that point.
        base, skip = 0, 0

        def count(x: int) -> int:
            if x >= base:
                return skip + self._raw(text[base:x])
            return self._raw(text[:x])

        def done(x: int, raw: int) -> str:
            head = text[:x]
            self._last = (head, raw)  # :meth:`text` of it right after costs nothing
            return head

        guess = getattr(self._text, "head_length", None)
        if guess is not None:
            raw = int(max_tokens / self._calibrator.slope(self._model))
            while scale(raw + 1) <= max_tokens:  # the most raw tokens that scale within
                raw += 1
            split = getattr(self._text, "head_split", None)
            kept = self._heads.pop(hash(text), None) if self._heads is not None else None
            found = None
            if kept is not None:  # its first ids, kept from its count: nothing to tokenize
                assert isinstance(self._text, TiktokenCounter)
                found = self._text.head_split_ids(text, kept, max(1, raw))
            if found is not None:
                at, base, skip = found
            elif split is not None:
                at, base, skip = split(text, max(1, raw))
            else:
                at = guess(text, max(1, raw))
            n = count(at)
            if scale(n) <= max_tokens:
                if at >= size:
                    return done(size, n)
                lo, lo_raw = at, n
                hi = at + 1  # almost always over: done
            else:
                if base:  # its tokens are among the guess's first: it fits
                    lo, lo_raw = base, skip
                if at > 0:
                    hi = at
        while True:
            hi_raw = count(hi)
            if scale(hi_raw) > max_tokens:
                break  # text[:hi] does not fit
            if hi == size:
                return done(size, hi_raw)
            lo, lo_raw = hi, hi_raw
            hi = min(size, base + 2 * (hi - base))  # twice as far past the split
        lo_t, hi_t = scale(lo_raw), scale(hi_raw)
        width = 2 * (hi - lo)
        while hi - lo > 1:
            if 4 * (hi - lo) > 3 * width:
                mid = (lo + hi) // 2  # the last guess hardly narrowed the range: bisect
            else:
                # Interpolate by tokens, aiming half a token past the limit so that the
                # guesses straddle the boundary (~5 counts on ordinary text), strictly inside.
                at = lo + (hi - lo) * (2 * (max_tokens - lo_t) + 1) // max(2, 2 * (hi_t - lo_t))
                mid = min(hi - 1, max(lo + 1, at))
            width = hi - lo
            n = count(mid)
            if scale(n) <= max_tokens:
                lo, lo_raw, lo_t = mid, n, scale(n)
            else:
                hi, hi_t = mid, scale(n)
        return done(lo, lo_raw)
