"""Content kinds: prose, code, logs, JSON and non-ASCII text split into tokens differently.

Two tokenizers agree on English prose far better than on anything else. Measured on
SmolLM2 (llama.cpp) against ``cl100k_base``: prose costs the server ~1.0× the local
count, code ~1.25×, JSON ~1.32×, log lines ~1.51× (SmolLM2 spells every digit on its
own; cl100k takes three at a time), and text in other scripts 1.15–1.37× (CJK, Cyrillic,
emoji: the vocabularies differ most there). One ratio for a whole prompt is therefore
only right for the mix it was learnt on. So the :class:`~agentflow.context.Calibrator`
learns a ratio per kind, and keeps its error margin per kind; this module says what kind
a message is, and :class:`KindTally` keeps a session's prompt split by kind,
incrementally.

The classifier is a cheap look at the first 4,096 characters, not a parser:

- ``non_ascii``: a quarter or more of the non-space characters are not ASCII (CJK,
  Cyrillic, Greek, Arabic, emoji, …; accented Latin text such as French or German stays
  far below). Counted as prose it would get prose's ratio and only the floor's margin,
  and a prompt over the window went out.
- ``json``: starts with ``{`` or ``[`` and ends with ``}`` or ``]``; an assistant
  message that only calls tools (its arguments are JSON).
- ``log``: most lines start with a digit, a ``[``-bracketed stamp or a level word, or
  carry a ``HH:MM:SS`` time; or digits are over 15% of the characters.
- ``code``: a fenced block, or most lines indented or ending in ``{ } ; : ) ,``.
- ``prose``: anything else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agentflow.context._prompt import PromptCounter

__all__ = ["KINDS", "ContentKind", "KindTally", "PromptShape", "content_kind", "message_kind"]

#: What a text is, for tokenization purposes.
ContentKind = Literal["prose", "code", "log", "json", "non_ascii"]
#: Every kind, in the order of :attr:`PromptShape.kinds` (a kind added later goes last).
KINDS: tuple[ContentKind, ...] = ("prose", "code", "log", "json", "non_ascii")
_INDEX = {k: i for i, k in enumerate(KINDS)}

_SAMPLE = 4096
_TIME = re.compile(r"\d\d:\d\d:\d\d")
_LOG_START = re.compile(r"\s*(?:\d|\[\d|\[?(?:INFO|WARN|WARNING|ERROR|DEBUG|TRACE|FATAL)\b)")
_CODE_END = frozenset("{};:),")
# The share of non-space characters outside ASCII from which a text is "non_ascii".
_NON_ASCII = 0.25


def _mostly_non_ascii(sample: str) -> bool:
    if sample.isascii():
        return False
    non_ascii = len(sample) - len(sample.encode("ascii", "ignore"))
    spaces = sample.count(" ") + sample.count("\n") + sample.count("\t")
    return non_ascii >= _NON_ASCII * (len(sample) - spaces)


def content_kind(text: str) -> ContentKind:
    """The kind of ``text`` (see the module's rules); ``"prose"`` for an empty text."""
    sample = text[: 2 * _SAMPLE].lstrip()[:_SAMPLE]  # never copies a long text whole
    end = text[-64:].rstrip()
    if not sample or not end:
        return "prose" if not text.strip() else content_kind(text.strip())
    if _mostly_non_ascii(sample):
        return "non_ascii"
    if sample[0] in "{[" and end[-1] in "}]":
        return "json"
    if "```" in sample:
        return "code"
    lines = [ln for ln in sample.splitlines() if ln.strip()]
    n = len(lines)
    digits = sum(map(sample.count, "0123456789"))
    if digits > 0.15 * len(sample):
        return "log"
    if n >= 2:
        logish = sum(1 for ln in lines if _LOG_START.match(ln) or _TIME.search(ln))
        if 2 * logish > n:
            return "log"
        codeish = sum(1 for ln in lines if ln[0] in " \t" or ln.rstrip()[-1] in _CODE_END)
        if 2 * codeish > n:
            return "code"
    return "prose"


def message_kind(message: Mapping[str, Any]) -> ContentKind:
    """The kind of a chat message: its text content's, or ``"json"`` for a message with
    tool calls and no text."""
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, Sequence):
        text = "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p
        )
    else:
        text = ""
    if not text.strip() and message.get("tool_calls"):
        return "json"
    return content_kind(text)


@dataclass(frozen=True, slots=True)
class PromptShape:
    """A prompt's local token count split by content kind, and its anchor.

    Attributes:
        kinds: local tokens of each kind in the whole prompt, in :data:`KINDS` order
            (template overhead counts with its message; tool schemas as ``json``); a
            shorter tuple is padded with zeros (the kinds added since).
        anchor: ``(tokens, reported)`` of this session's anchored prompt (see
            :attr:`PromptCounter.anchor_point`), or ``None``.
        growth: local tokens of each kind added since the anchor (``kinds`` without one).
        system: whether the prompt starts with a system (or developer) message. Many
            templates add a default system prompt when it does not (SmolLM2's and
            Qwen2.5's, ~20 tokens), so the template's fixed cost is learnt for each.
    """

    kinds: tuple[int, ...]
    anchor: tuple[int, int] | None = None
    growth: tuple[int, ...] = ()
    system: bool = True

    def __post_init__(self) -> None:
        # A shape built for fewer kinds (before "non_ascii" was added) has none of the rest.
        for name in ("kinds", "growth"):
            value = getattr(self, name)
            if value and len(value) < len(KINDS):
                object.__setattr__(self, name, (*value, *(0,) * (len(KINDS) - len(value))))

    @property
    def raw(self) -> int:
        """The whole prompt's local count."""
        return sum(self.kinds)


class KindTally:
    """One session's prompt split by kind, kept in step with its :class:`PromptCounter`.

    After each :meth:`PromptCounter.count`, :meth:`update` classifies only the messages
    from :attr:`PromptCounter.first_changed` on (each once) and keeps per-kind totals, so
    :meth:`shape` costs O(1) whatever the history's length.
    """

    __slots__ = ("_anchor_len", "_at_anchor", "_rows", "_system", "_totals")

    def __init__(self) -> None:
        self._rows: list[tuple[int, int]] = []  # (kind index, local tokens) per message
        self._totals = [0] * len(KINDS)
        self._at_anchor: list[int] | None = None  # the totals when the prompt was anchored
        self._anchor_len = 0
        self._system = False

    def update(
        self,
        prompt: PromptCounter,
        messages: Sequence[Mapping[str, Any]],
        count: Callable[[Mapping[str, Any]], int],
    ) -> None:
        """Follow ``prompt``'s last count of ``messages``; ``count`` is the message
        counter's ``count_message`` (a cache hit for the messages just counted)."""
        # Others may count with the same PromptCounter in between (the prefix tracker
        # counts the prompt followed by the reply): what changed for this tally is what
        # changed since *its* last update, so never past the rows it holds.
        first = min(prompt.first_changed, len(self._rows))
        self._system = bool(messages) and messages[0].get("role") in ("system", "developer")
        rows, totals = self._rows, self._totals
        for k, n in rows[first:]:
            totals[k] -= n
        del rows[first:]
        for m in messages[first:]:
            k, n = _INDEX[message_kind(m)], count(m)
            rows.append((k, n))
            totals[k] += n
        if prompt.anchor_point is None or first < self._anchor_len:
            self._at_anchor = None  # an edit inside the anchored prompt dropped the anchor

    def anchored(self) -> None:
        """The prompt last counted was anchored (:meth:`PromptCounter.anchor`)."""
        self._at_anchor = list(self._totals)
        self._anchor_len = len(self._rows)

    def shape(self, prompt: PromptCounter, *, tools_kind: ContentKind = "json") -> PromptShape:
        """The last counted prompt's :class:`PromptShape`. Tokens not in any message
        (tool schemas, reply priming) count as ``tools_kind`` when the prompt has tools,
        else as prose."""
        kinds = list(self._totals)
        kinds[_INDEX[tools_kind] if prompt.tools else 0] += prompt.tokens - sum(kinds)
        at = self._at_anchor if prompt.anchor_point is not None else None
        if at is None:
            return PromptShape(tuple(kinds), None, tuple(kinds), self._system)
        growth = tuple(t - a for t, a in zip(self._totals, at, strict=True))
        return PromptShape(tuple(kinds), prompt.anchor_point, growth, self._system)
