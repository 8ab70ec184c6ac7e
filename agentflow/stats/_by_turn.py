"""Figures by turn index: how context, cache hits and latency grow along a conversation.

Turn 0 of every session is folded into one row, turn 1 into the next, and so on: the
context (prompt tokens) of turn *i* is a sketch, so the report can draw context growth
as p10/p50/p90 against the turn index without keeping any per-session series. Rows stop
at ``max_index``; later turns fold into the last row, which the report marks open-ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow._metrics import TurnMetrics
from agentflow.stats._sketch import Sketch

__all__ = ["ByTurnIndex", "TurnIndexStats"]

#: Context quantiles reported per turn index (besides mean, min and max).
CONTEXT_QUANTILES = (0.1, 0.5, 0.9)


class TurnIndexStats:
    """Totals over every session's turn number *i*."""

    __slots__ = (
        "cache_prompt_tokens",
        "cached_tokens",
        "context",
        "e2e_sum_s",
        "output_tokens",
        "ttft_sum_s",
        "ttft_turns",
        "turns",
    )

    def __init__(self, relative_accuracy: float) -> None:
        self.turns = 0
        #: Prompt tokens of the turn (reported, else the client's estimate).
        self.context = Sketch(relative_accuracy)
        self.cached_tokens = 0
        self.cache_prompt_tokens = 0
        self.ttft_sum_s = 0.0
        self.ttft_turns = 0
        self.e2e_sum_s = 0.0
        self.output_tokens = 0

    def observe(self, m: TurnMetrics, context: int | None) -> None:
        """Fold one turn in."""
        self.turns += 1
        if context is not None:
            self.context.add(context)
        if m.cached_tokens is not None and m.prompt_tokens is not None:
            self.cached_tokens += m.cached_tokens
            self.cache_prompt_tokens += m.prompt_tokens
        if m.ttft_s is not None:
            self.ttft_sum_s += m.ttft_s
            self.ttft_turns += 1
        self.e2e_sum_s += m.e2e_s
        self.output_tokens += m.output_tokens

    def merge(self, other: TurnIndexStats) -> None:
        """Add ``other``'s totals."""
        self.turns += other.turns
        self.context.merge(other.context)
        self.cached_tokens += other.cached_tokens
        self.cache_prompt_tokens += other.cache_prompt_tokens
        self.ttft_sum_s += other.ttft_sum_s
        self.ttft_turns += other.ttft_turns
        self.e2e_sum_s += other.e2e_sum_s
        self.output_tokens += other.output_tokens

    def to_report(self, index: int, open_ended: bool) -> dict[str, Any]:
        """One ``context.by_turn[]`` entry of the report."""
        c = self.context
        return {
            "turn": index,
            "open_ended": open_ended,
            "turns": self.turns,
            "context_tokens": {
                "count": c.count,
                "mean": c.mean,
                "min": c.min,
                "max": c.max,
                **c.quantiles(CONTEXT_QUANTILES),
            },
            "cache_hit_rate": (
                self.cached_tokens / self.cache_prompt_tokens if self.cache_prompt_tokens else None
            ),
            "ttft_mean_s": self.ttft_sum_s / self.ttft_turns if self.ttft_turns else None,
            "e2e_mean_s": self.e2e_sum_s / self.turns if self.turns else None,
            "output_tokens_mean": self.output_tokens / self.turns if self.turns else None,
        }


class ByTurnIndex:
    """One :class:`TurnIndexStats` per turn index, up to ``max_index`` rows.

    Args:
        max_index: rows kept; turn ``max_index − 1`` and later share the last row.
        relative_accuracy: the context sketches' α.
    """

    __slots__ = ("_rows", "max_index", "relative_accuracy")

    def __init__(self, max_index: int, relative_accuracy: float) -> None:
        if max_index < 1:
            raise ValueError(f"max_turn_index must be ≥ 1, got {max_index!r}")
        self.max_index = max_index
        self.relative_accuracy = relative_accuracy
        self._rows: list[TurnIndexStats] = []

    @property
    def rows(self) -> Sequence[TurnIndexStats]:
        """Row *i* holds turn *i* of every session (the last row also every later turn)."""
        return self._rows

    def observe(self, turn: int, m: TurnMetrics, context: int | None) -> None:
        """Fold turn number ``turn`` of some session in."""
        i = min(turn, self.max_index - 1)
        rows = self._rows
        while len(rows) <= i:
            rows.append(TurnIndexStats(self.relative_accuracy))
        rows[i].observe(m, context)

    def merge(self, other: ByTurnIndex) -> None:
        """Add ``other``'s rows (the same ``max_index``)."""
        if other.max_index != self.max_index:
            raise ValueError("by-turn merge needs the same max_turn_index")
        rows = self._rows
        for i, row in enumerate(other._rows):
            if i == len(rows):
                rows.append(TurnIndexStats(self.relative_accuracy))
            rows[i].merge(row)

    def to_report(self) -> list[dict[str, Any]]:
        """The report's ``context.by_turn`` list."""
        last = self.max_index - 1
        return [r.to_report(i, i == last) for i, r in enumerate(self._rows)]
