"""One flat row per model turn: what the CSV export writes and raw samples keep.

A :class:`TurnRow` holds a turn's scalar figures and nothing of its text or per-chunk
arrays (ITL is summarised as mean and max). Keeping every row of a long run still costs
~350 bytes per turn (measured), which is why :class:`~agentflow.stats.FleetStats` keeps
them only when asked (``keep_samples=True``) and the CSV export streams them to a file.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from agentflow._metrics import TurnMetrics
from agentflow._trace import PromptInfo, TurnTrace

__all__ = ["TurnRow", "turn_row"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRow:
    """A turn's figures, flat. Times ``*_ns`` are on the trace clock; ``None`` = not measured.

    Attributes:
        agent, session_id, turn: which turn.
        model, response_id: as the server named them.
        ready_ns: the turn became ready, its prompt built (``sent_ns`` − queue wait).
        sent_ns, first_output_ns, end_ns: request sent, first output chunk, end of stream.
        queue_wait_s, ttft_s, tpot_s, decode_tps, e2e_s: as in ``docs/metrics.md``.
        chunks: output-bearing chunks.
        itl_mean_s, itl_max_s: the mean and longest gap between them.
        output_tokens, output_tokens_source: the count and where it came from.
        tokens_per_chunk_exact: whether per-chunk token counts are exact.
        prompt_tokens: as the server reported them.
        estimated_prompt_tokens: the client's estimate, when it made one.
        cached_tokens, cached_source: prefix-cache hits as reported, and the field used.
        cache_hit_rate: cached / prompt tokens.
        finish_reason: the server's finish reason.
        tool_calls: how many tool calls the turn asked for.
        reconnects: requests resent before any response byte.
        done: whether ``data: [DONE]`` arrived.
    """

    agent: str
    session_id: str
    turn: int
    model: str | None
    response_id: str | None
    ready_ns: int
    sent_ns: int
    first_output_ns: int | None
    end_ns: int
    queue_wait_s: float
    ttft_s: float | None
    tpot_s: float | None
    decode_tps: float | None
    e2e_s: float
    chunks: int
    itl_mean_s: float | None
    itl_max_s: float | None
    output_tokens: int
    output_tokens_source: str
    tokens_per_chunk_exact: bool
    prompt_tokens: int | None
    estimated_prompt_tokens: int | None
    cached_tokens: int | None
    cached_source: str | None
    cache_hit_rate: float | None
    finish_reason: str | None
    tool_calls: int
    reconnects: int
    done: bool

    @classmethod
    def columns(cls) -> list[str]:
        """The field names, in CSV column order."""
        return [f.name for f in dataclasses.fields(cls)]

    def to_dict(self) -> dict[str, Any]:
        """The row as a plain dict (JSON-ready)."""
        return {name: getattr(self, name) for name in self.columns()}


def turn_row(
    agent: str,
    session_id: str,
    turn: int,
    metrics: TurnMetrics,
    trace: TurnTrace,
    prompt: PromptInfo | None = None,
) -> TurnRow:
    """Flatten one finished turn into a :class:`TurnRow`."""
    m = metrics
    itl = m.itl_s
    return TurnRow(
        agent=agent,
        session_id=session_id,
        turn=turn,
        model=trace.model,
        response_id=trace.response_id,
        ready_ns=ready_ns(m, trace),
        sent_ns=trace.sent_ns,
        first_output_ns=trace.first_output_ns,
        end_ns=trace.end_ns,
        queue_wait_s=m.queue_wait_s,
        ttft_s=m.ttft_s,
        tpot_s=m.tpot_s,
        decode_tps=m.decode_tps,
        e2e_s=m.e2e_s,
        chunks=len(trace.chunk_ns),
        itl_mean_s=math.fsum(itl) / len(itl) if itl else None,
        itl_max_s=max(itl) if itl else None,
        output_tokens=m.output_tokens,
        output_tokens_source=m.output_tokens_source,
        tokens_per_chunk_exact=m.tokens_per_chunk_exact,
        prompt_tokens=m.prompt_tokens,
        estimated_prompt_tokens=None if prompt is None else prompt.estimated_tokens,
        cached_tokens=m.cached_tokens,
        cached_source=m.cached_source,
        cache_hit_rate=m.cache_hit_rate,
        finish_reason=trace.finish_reason,
        tool_calls=len(trace.tool_calls),
        reconnects=m.reconnects,
        done=trace.done,
    )


def ready_ns(metrics: TurnMetrics, trace: TurnTrace) -> int:
    """When the turn became ready: ``sent_ns`` − queue wait (to the nanosecond)."""
    return trace.sent_ns - round(metrics.queue_wait_s * 1e9)
