"""Per-agent running totals: O(1) memory per agent, whatever the number of turns.

An :class:`AgentStats` is a slotted row of counters, sums and extremes — no samples,
no sketch — so 10,000 agents cost a few megabytes (``docs/stats.md`` has the measured
figure). Distributions *across* agents (the per-agent decode tok/s spread, the slowest
agents) are computed from these rows when a report is built.
"""

from __future__ import annotations

import math
from typing import Any

from agentflow._metrics import TurnMetrics
from agentflow._trace import TurnTrace

__all__ = ["AgentStats"]

_NS = 1e9  # ns → s by dividing: correctly rounded (× 1e-9 made 60 ms 0.060000000000000005)


class AgentStats:
    """One agent's (or one session's) totals so far.

    Attributes:
        agent: the agent's name.
        session_id: the session, when rows are kept per session; else the last one seen.
        turns: model turns that finished.
        output_tokens: output tokens over those turns.
        chunk_count_turns: turns whose output count came from counting chunks (no usage).
        prompt_tokens: prompt tokens over the turns that reported them.
        prompt_turns: turns that reported prompt tokens.
        context_tokens: the last turn's prompt tokens (reported, else the client's estimate).
        max_context_tokens: the largest of those.
        cached_tokens: prompt tokens served from the prefix cache (turns that reported it).
        cache_prompt_tokens: prompt tokens of the turns that reported ``cached_tokens``.
        ttft_sum_s, ttft_turns, ttft_max_s: time to first token.
        e2e_sum_s, e2e_max_s: request latency.
        queue_wait_sum_s, queue_wait_max_s: admission wait.
        decode_tokens, decode_s: streamed output tokens after the first
            (``TurnMetrics.decode_tokens``), and the time they took,
            over the turns with a TPOT — ``decode_tokens / decode_s`` is the agent's decode
            speed, each turn weighted by its tokens.
        decode_tps_min, decode_tps_max: the slowest and fastest turn's decode tok/s.
        first_ns, last_ns: the first turn became ready, the last one ended (trace clock).
        reconnects: requests resent before any response byte.
        retries: attempts that failed and were sent again (``RetryEvent``).
        tool_calls, tool_errors, tool_s: tools run, failed, and their total duration.
        slo_met: per SLO (in the stats' order), turns that met it.
        sessions, sessions_ok: sessions that ended, and those that completed.
        status, error: how the last session ended, and its error.
        ended_ns: when that session ended (trace clock: its result's ``end_ns``, else the
            stats' clock, else a lower bound), or ``None``; merges keep the status of the
            session that ended last.
    """

    __slots__ = (
        "agent",
        "cache_prompt_tokens",
        "cached_tokens",
        "chunk_count_turns",
        "context_ns",
        "context_tokens",
        "decode_s",
        "decode_tokens",
        "decode_tps_max",
        "decode_tps_min",
        "e2e_max_s",
        "e2e_sum_s",
        "ended_ns",
        "error",
        "first_ns",
        "last_ns",
        "max_context_tokens",
        "output_tokens",
        "prompt_tokens",
        "prompt_turns",
        "queue_wait_max_s",
        "queue_wait_sum_s",
        "reconnects",
        "retries",
        "session_id",
        "sessions",
        "sessions_ok",
        "slo_met",
        "status",
        "tool_calls",
        "tool_errors",
        "tool_s",
        "ttft_max_s",
        "ttft_sum_s",
        "ttft_turns",
        "turns",
    )

    def __init__(self, agent: str, session_id: str | None, n_slos: int = 0) -> None:
        self.agent = agent
        self.session_id = session_id
        self.turns = self.output_tokens = self.chunk_count_turns = 0
        self.prompt_tokens = self.prompt_turns = 0
        self.context_tokens: int | None = None
        self.context_ns = -(2**62)  # when the turn that set context_tokens ended (merges)
        self.max_context_tokens: int | None = None
        self.cached_tokens = self.cache_prompt_tokens = 0
        self.ttft_sum_s = self.ttft_max_s = 0.0
        self.ttft_turns = 0
        self.e2e_sum_s = self.e2e_max_s = 0.0
        self.queue_wait_sum_s = self.queue_wait_max_s = 0.0
        self.decode_tokens = 0
        self.decode_s = 0.0
        self.decode_tps_min = math.inf
        self.decode_tps_max = 0.0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.reconnects = self.retries = self.tool_calls = self.tool_errors = 0
        self.tool_s = 0.0
        self.slo_met = [0] * n_slos
        self.sessions = self.sessions_ok = 0
        self.status: str | None = None
        self.error: str | None = None
        self.ended_ns: int | None = None

    def observe(self, m: TurnMetrics, trace: TurnTrace, context: int | None) -> None:
        """Fold one finished turn in (``context``: its prompt size, if known)."""
        self.turns += 1
        self.output_tokens += m.output_tokens
        if m.output_tokens_source == "chunk_count":
            self.chunk_count_turns += 1
        p = m.prompt_tokens
        if p is not None:
            self.prompt_tokens += p
            self.prompt_turns += 1
            if m.cached_tokens is not None:
                self.cached_tokens += m.cached_tokens
                self.cache_prompt_tokens += p
        if context is not None:
            # The largest over every turn, whatever the order turns are folded in
            # (from_result folds session by session); the latest by end time only.
            mc = self.max_context_tokens
            self.max_context_tokens = context if mc is None or context > mc else mc
            if trace.end_ns >= self.context_ns:
                self.context_tokens = context
                self.context_ns = trace.end_ns
        t = m.ttft_s
        if t is not None:
            self.ttft_sum_s += t
            self.ttft_turns += 1
            if t > self.ttft_max_s:
                self.ttft_max_s = t
            if m.tpot_s is not None:
                self.decode_tokens += m.decode_tokens
                self.decode_s += m.e2e_s - t
                tps = m.decode_tps or 0.0
                if tps < self.decode_tps_min:
                    self.decode_tps_min = tps
                if tps > self.decode_tps_max:
                    self.decode_tps_max = tps
        self.e2e_sum_s += m.e2e_s
        if m.e2e_s > self.e2e_max_s:
            self.e2e_max_s = m.e2e_s
        q = m.queue_wait_s
        self.queue_wait_sum_s += q
        if q > self.queue_wait_max_s:
            self.queue_wait_max_s = q
        ready = trace.sent_ns - round(q * 1e9)
        if self.first_ns is None or ready < self.first_ns:
            self.first_ns = ready
        if self.last_ns is None or trace.end_ns > self.last_ns:
            self.last_ns = trace.end_ns
        self.reconnects += m.reconnects

    @property
    def decode_tps(self) -> float | None:
        """The agent's decode speed: output tokens after the first / the time they took."""
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else None

    @property
    def ttft_mean_s(self) -> float | None:
        """Mean time to first token over the turns that had output."""
        return self.ttft_sum_s / self.ttft_turns if self.ttft_turns else None

    @property
    def cache_hit_rate(self) -> float | None:
        """Cached / prompt tokens over the turns that reported both."""
        c = self.cache_prompt_tokens
        return self.cached_tokens / c if c else None

    def merge(self, other: AgentStats) -> None:
        """Fold ``other`` (the same agent, seen by another worker) into this row."""
        for name in (
            "turns", "output_tokens", "chunk_count_turns", "prompt_tokens", "prompt_turns",
            "cached_tokens", "cache_prompt_tokens", "ttft_sum_s", "ttft_turns", "e2e_sum_s",
            "queue_wait_sum_s", "decode_tokens", "decode_s", "reconnects", "retries", "tool_calls",
            "tool_errors", "tool_s", "sessions", "sessions_ok",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("ttft_max_s", "e2e_max_s", "queue_wait_max_s", "decode_tps_max"):
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        self.decode_tps_min = min(self.decode_tps_min, other.decode_tps_min)
        if other.max_context_tokens is not None:
            mine = self.max_context_tokens
            self.max_context_tokens = max(mine or 0, other.max_context_tokens)
        if other.first_ns is not None and (self.first_ns is None or other.first_ns < self.first_ns):
            self.first_ns = other.first_ns
        if other.context_tokens is not None and (
            self.context_tokens is None or other.context_ns > self.context_ns
        ):
            self.context_tokens, self.context_ns = other.context_tokens, other.context_ns
        # The row's session: the one seen last (a turn's end or a session's end, whichever
        # is later); its status: that of the session that ended last, by end time when
        # both are known, else the one whose worker's last turn ended later.
        later = other.last_ns is not None and (self.last_ns is None or other.last_ns > self.last_ns)
        if _seen(other) > _seen(self):
            self.session_id = other.session_id or self.session_id
        if later:
            self.last_ns = other.last_ns
        mine, theirs = self.ended_ns, other.ended_ns
        if other.status is not None and (
            self.status is None
            or (theirs > mine if theirs is not None and mine is not None else later)
        ):
            self.status, self.error, self.ended_ns = other.status, other.error, theirs
        self.slo_met = [a + b for a, b in zip(self.slo_met, other.slo_met, strict=True)]

    def to_report(
        self, slo_labels: list[str], origin_ns: int, *, tools: bool = True
    ) -> dict[str, Any]:
        """This row as a report entry (``docs/report-schema.md``, ``agents[]``);
        ``tools``: whether tool outcomes and durations were seen (else they are null)."""
        turns = self.turns
        return {
            "agent": self.agent,
            "session_id": self.session_id,
            "status": self.status,
            "error": self.error,
            "sessions": self.sessions,
            "sessions_completed": self.sessions_ok,
            "turns": turns,
            "output_tokens": self.output_tokens,
            "chunk_count_turns": self.chunk_count_turns,
            "prompt_tokens": self.prompt_tokens if self.prompt_turns else None,
            "context_tokens": self.context_tokens,
            "max_context_tokens": self.max_context_tokens,
            "cached_tokens": self.cached_tokens if self.cache_prompt_tokens else None,
            "cache_hit_rate": self.cache_hit_rate,
            "ttft_s": {
                "mean": self.ttft_mean_s,
                "max": self.ttft_max_s if self.ttft_turns else None,
            },
            "e2e_s": {
                "mean": self.e2e_sum_s / turns if turns else None,
                "max": self.e2e_max_s if turns else None,
            },
            "queue_wait_s": {
                "mean": self.queue_wait_sum_s / turns if turns else None,
                "max": self.queue_wait_max_s if turns else None,
            },
            "decode_tps": {
                "mean": self.decode_tps,
                "min": self.decode_tps_min if self.decode_s > 0 else None,
                "max": self.decode_tps_max if self.decode_s > 0 else None,
            },
            "first_s": None if self.first_ns is None else (self.first_ns - origin_ns) / _NS,
            "last_s": None if self.last_ns is None else (self.last_ns - origin_ns) / _NS,
            "reconnects": self.reconnects,
            "retries": self.retries,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors if tools else None,
            "tool_s": self.tool_s if tools else None,
            "slo_turns_met": dict(zip(slo_labels, self.slo_met, strict=True)),
            "meets_slo": {
                label: turns > 0 and met == turns
                for label, met in zip(slo_labels, self.slo_met, strict=True)
            },
        }


def _seen(row: AgentStats) -> int:
    """When ``row`` last saw its session: its last turn's end or session's end, if later."""
    return max(t for t in (row.last_ns, row.ended_ns, -(2**62)) if t is not None)
