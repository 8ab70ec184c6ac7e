"""Per-turn latency figures, computed from a :class:`TurnTrace` by the formulas in
``docs/metrics.md`` (keep the two identical)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from agentflow._trace import CacheSource, TurnTrace

__all__ = ["OutputTokenSource", "TurnMetrics", "turn_metrics"]

#: Where ``output_tokens`` came from: the server's ``usage.completion_tokens``, or —
#: when the server sent no usage — the number of output-bearing chunks (a lower bound
#: when chunks carry several tokens).
OutputTokenSource = Literal["server_usage", "chunk_count"]

_NS = 1e9  # ns → s by dividing: correctly rounded (× 1e-9 made 60 ms 0.060000000000000005)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnMetrics:
    """The latency figures of one model turn. Times in seconds; ``None`` = not measurable.

    Attributes:
        queue_wait_s: the turn became ready (its prompt built: tool results appended,
            the context policy applied — a compaction's summary request is before it) →
            the request of the attempt that succeeded was sent (a retried turn's failed
            attempts and backoffs are in it).
        ttft_s: request sent → first output-bearing chunk.
        e2e_s: request sent → end of stream (``[DONE]`` or close).
        tpot_s: (E2E − TTFT) / (output tokens − hidden reasoning tokens − 1): over the
            streamed tokens only; needs ≥ 2 of them and output chunks that span time —
            the last arrived after the first (``None`` when every chunk arrived in one
            read, as from a buffering proxy, even if the end of the stream came in a
            later one).
        decode_tps: 1 / TPOT, the per-agent decode speed in tokens/s.
        itl_s: each gap between successive output-bearing chunks (per chunk, not per token).
        tokens_per_chunk: output tokens each output-bearing chunk carried.
        tokens_per_chunk_exact: whether ``tokens_per_chunk`` is exact (see TurnTrace).
        prompt_tokens: ``usage.prompt_tokens``, or ``None`` if not reported.
        cached_tokens: prompt tokens served from the prefix cache, or ``None`` if not reported.
        cached_source: which usage field ``cached_tokens`` came from.
        output_tokens: see ``output_tokens_source``.
        output_tokens_source: ``server_usage`` or ``chunk_count``.
        hidden_reasoning_tokens: of ``output_tokens``, reasoning tokens the server
            reported (``usage.completion_tokens_details.reasoning_tokens``) but never
            streamed; TPOT leaves them out (they were decoded before the first chunk).
    """

    queue_wait_s: float
    ttft_s: float | None
    e2e_s: float
    tpot_s: float | None
    decode_tps: float | None
    itl_s: tuple[float, ...]
    tokens_per_chunk: tuple[int, ...]
    tokens_per_chunk_exact: bool
    prompt_tokens: int | None
    cached_tokens: int | None
    cached_source: CacheSource | None
    output_tokens: int
    output_tokens_source: OutputTokenSource
    reconnects: int = 0
    hidden_reasoning_tokens: int = 0

    @property
    def decode_tokens(self) -> int:
        """The output tokens the decode phase spans: the streamed ones after the first
        (what TPOT divides by; 0 without a TPOT)."""
        if self.tpot_s is None:
            return 0
        return self.output_tokens - self.hidden_reasoning_tokens - 1

    @property
    def cache_hit_rate(self) -> float | None:
        """cached / prompt tokens, or ``None`` when either was not reported."""
        if self.cached_tokens is None or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens


def turn_metrics(trace: TurnTrace, *, ready_ns: int | None = None) -> TurnMetrics:
    """Compute a turn's figures.

    Args:
        trace: the streamed turn.
        ready_ns: when the turn became ready to send (same clock); ``None`` = no queue wait.
    """
    usage = trace.usage
    hidden = 0
    if usage is not None and usage.completion_tokens is not None:
        out, source = usage.completion_tokens, "server_usage"
        hidden = usage.hidden_reasoning_tokens(trace.reasoning)
    else:
        out, source = sum(trace.chunk_tokens), "chunk_count"
    # the tokens the stream showed: hidden reasoning was decoded before the first chunk,
    # so dividing the visible decode window by it too would make TPOT many times too fast
    shown = out - hidden
    e2e = (trace.end_ns - trace.sent_ns) / _NS
    first = trace.first_output_ns
    ttft = None if first is None else (first - trace.sent_ns) / _NS
    times = trace.chunk_ns
    tpot = None
    # The decode phase was observed only if the output chunks span time: chunks that all
    # came in one read (a buffering proxy) and an end a few µs later would give a TPOT of
    # µs / (n − 1), millions of tokens/s.
    if ttft is not None and shown >= 2 and times[-1] > times[0] and e2e > ttft:
        tpot = (e2e - ttft) / (shown - 1)
    itl = tuple((b - a) / _NS for a, b in pairwise(times))
    return TurnMetrics(
        queue_wait_s=0.0 if ready_ns is None else max(0, trace.sent_ns - ready_ns) / _NS,
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=tpot,
        decode_tps=None if tpot is None else 1.0 / tpot,
        itl_s=itl,
        tokens_per_chunk=trace.chunk_tokens,
        tokens_per_chunk_exact=trace.tokens_exact,
        prompt_tokens=None if usage is None else usage.prompt_tokens,
        cached_tokens=None if usage is None else usage.cached_tokens,
        cached_source=None if usage is None else usage.cached_source,
        output_tokens=out,
        output_tokens_source=source,  # type: ignore[arg-type]
        reconnects=trace.reconnects,
        hidden_reasoning_tokens=hidden,
    )
