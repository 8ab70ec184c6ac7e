"""One cache bust: what it is reported as (:class:`CacheBusterWarning`) and what it cost.

A *bust* (:class:`Bust`) is one turn, or one new session, whose prefix differs only
volatilely from its reference. Its loss is everything from the first differing character
to the end of what would otherwise have hit — the history after the prefix too:

- :func:`measured_loss`, from the server's usage of the turn: what the server would have
  served — what it held of the session (turn to turn), or the shared prefix's share of
  the prompt (across sessions) — in whole blocks, less the ``cached_tokens`` it served;
- :func:`estimated_loss`, from the text, when the server's figures are missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentflow._context_events import CacheBusterScope, CacheBusterWarning
from agentflow._logging import get_logger
from agentflow.context._bustdiff import Finding, Prefix, message_texts

if TYPE_CHECKING:
    from agentflow._trace import Usage

__all__ = [
    "Bust",
    "CacheBusterScope",
    "CacheBusterWarning",
    "default_count",
    "estimated_loss",
    "measured_loss",
    "warnings_of",
]

_log = get_logger("agentflow.context")


def default_count(text: str) -> int:
    """About four characters per token."""
    return math.ceil(len(text) / 4)


@dataclass(slots=True)
class Bust:
    """One turn's volatile difference, until it is reported."""

    agent: str
    scope: CacheBusterScope
    turn: int | None
    ref: Prefix
    cur: Prefix
    causes: list[tuple[int, Finding]]
    first: int
    #: Messages after the pinned prefix that were sent before (lost with it), for the
    #: estimate.
    history: tuple[Mapping[str, Any], ...]
    #: The whole prompt's texts (``sessions`` scope), for the shared prefix's share of it.
    prompt_texts: tuple[str, ...]
    emit: Callable[[CacheBusterWarning], None] | None


def measured_loss(
    bust: Bust,
    usage: Usage | None,
    *,
    held: int | None,
    count: Callable[[str], int],
    block_size: int,
) -> int | None:
    """The bust's loss from the server's figures: the tokens it would have served — in
    whole blocks, at most the prompt but its last token (a server always computes that
    one) — less those it did serve; ``None`` without the figures.

    Args:
        bust: the bust.
        usage: the turn's usage.
        held: tokens of the session the server held before the turn (turn to turn).
        count: the text's token estimate (across sessions: the shared prefix's share).
        block_size: the server's prefix-cache block.
    """
    if usage is None or not usage.prompt_tokens or usage.cached_tokens is None:
        return None
    if bust.scope == "turns":
        if held is None:
            return None
        would = held
    else:
        # The shared prefix's share of the prompt, as the server counted the prompt.
        total = sum(count(t) for t in bust.prompt_texts)
        shared = sum(count(t) for t in bust.cur.texts)
        if total <= 0:
            return None
        would = round(usage.prompt_tokens * shared / total)
    would = min(would, usage.prompt_tokens - 1)
    would -= would % block_size
    return max(0, would - usage.cached_tokens)


def estimated_loss(bust: Bust, count: Callable[[str], int]) -> int:
    """The bust's loss from the text: the prefix from its first differing character, and
    (turn to turn) the history sent after it before, by ``count``."""
    total, offset = 0, 0
    for text in bust.cur.texts:
        end = offset + len(text)
        if end > bust.first:
            total += count(text[max(0, bust.first - offset) :])
        offset = end
    for message in bust.history:
        total += sum(count(t) for t in message_texts(message))
    return total


def warnings_of(
    bust: Bust,
    lost: int,
    source: Literal["server", "estimate"],
    counts: dict[tuple[str, str], int],
    logged: set[tuple[str, str, str]],
) -> Iterator[CacheBusterWarning]:
    """The bust's warnings, one per cause, each counted and logged as it is yielded — at
    ``warning`` level unless its (scope, kind, segment) is in ``logged`` (then added), at
    ``debug`` if it is; a cause not reached (the caller stopped) is neither.

    Args:
        bust: the bust.
        lost: its loss in tokens, and where that figure comes from (``source``).
        counts: occurrences so far per (kind, segment), counted up here.
        logged: the (scope, kind, segment) logged at ``warning`` level so far.
    """
    cur, ref = bust.cur, bust.ref
    for i, f in bust.causes:
        cause = (f.kind, cur.labels[i])
        counts[cause] = occurrence = counts.get(cause, 0) + 1
        text, ref_text = cur.texts[i], ref.texts[i]
        warning = CacheBusterWarning(
            agent=bust.agent,
            session_id=cur.session_id,
            turn=bust.turn,
            kind=f.kind,
            scope=bust.scope,
            reference_session_id=ref.session_id,
            segment=cur.labels[i],
            start=f.start,
            end=f.end,
            snippet=text[f.start : f.end],
            reference_start=f.ref_start,
            reference_end=f.ref_end,
            reference_snippet=ref_text[f.ref_start : f.ref_end],
            lost_tokens=lost,
            lost_source=source,
            occurrence=occurrence,
        )
        key = (bust.scope, *cause)
        log = _log.debug if key in logged else _log.warning
        logged.add(key)
        log(
            "context.cache_buster",
            agent=bust.agent,
            session=cur.session_id,
            turn=bust.turn,
            kind=f.kind,
            scope=bust.scope,
            reference_session=ref.session_id,
            segment=warning.segment,
            span=(f.start, f.end),
            snippet=_clip(warning.snippet),
            reference_snippet=_clip(warning.reference_snippet),
            lost_tokens=lost,
            lost_source=source,
            occurrence=occurrence,
        )
        yield warning


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"
