"""Trace replay: the mapping from a trace (``docs/traces.md``) to the
:class:`SessionScript` s the bench runner executes.

The format itself — :class:`TraceRecord`, its reader and writer, the shipped traces — is
``_trace_format``; every name is importable from here, as before.

:func:`trace_scripts` makes one script per session, one :class:`TurnScript` per
request: the first request's timestamp places the session (``arrival_s``); before a
later request the session waits, after the previous response, for the request's
``tool_s`` and ``think_s`` when the trace gives them, otherwise for the recorded gap
(the time from the previous response's end — its ``timestamp + duration_s`` — to this
request; without ``duration_s``, the gap between the two timestamps). Each turn's
message is its ``text`` (or its ``messages``' contents joined), or ``input_tokens``
tokens of synthetic text; its ``output_tokens`` is the turn's ``max_tokens``. A
session's ``system`` prompt (or its ``prefix_blocks``, or ``prefix_tokens`` of
synthetic text) is shared, byte for byte, by the sessions with the same ``prefix_key``.
Every time is multiplied by ``time_scale`` (0.5 replays twice as fast).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from agentflow._errors import ConfigError
from agentflow.bench._script import blocks_text
from agentflow.bench._spec import SessionScript, TurnScript, synth_text
from agentflow.bench._trace_format import _BOUNDED as _BOUNDED
from agentflow.bench._trace_format import _NONNEG_FLOATS as _NONNEG_FLOATS
from agentflow.bench._trace_format import _NONNEG_INTS as _NONNEG_INTS
from agentflow.bench._trace_format import _POS_INTS as _POS_INTS
from agentflow.bench._trace_format import _TRACES as _TRACES
from agentflow.bench._trace_format import DEFAULT_BLOCK_TOKENS as DEFAULT_BLOCK_TOKENS
from agentflow.bench._trace_format import (
    SHIPPED_TRACES,
    TRACE_FORMATS,
    TraceMessage,
    TraceRecord,
    TraceSource,
    load_trace,
    read_trace,
    shipped_trace,
    write_trace,
)
from agentflow.bench._trace_format import _check as _check
from agentflow.bench._trace_format import _lines as _lines
from agentflow.bench._trace_format import _read_lines as _read_lines

__all__ = [
    "SHIPPED_TRACES",
    "TRACE_FORMATS",
    "TraceMessage",
    "TraceRecord",
    "TraceSource",
    "blocks_text",
    "load_trace",
    "read_trace",
    "shipped_trace",
    "trace_scripts",
    "write_trace",
]

#: ``max_tokens`` of a replayed request whose record gives no ``output_tokens``.
DEFAULT_OUTPUT_TOKENS = 128


def trace_scripts(
    records: Sequence[TraceRecord],
    *,
    time_scale: float = 1.0,
    default_output_tokens: int = DEFAULT_OUTPUT_TOKENS,
) -> list[SessionScript]:
    """One :class:`SessionScript` per session of the trace, ordered by arrival.

    Args:
        records: the trace (any order; a session's requests are ordered by ``turn``,
            else by their order in ``records``).
        time_scale: every time (arrivals, tool and think time, gaps) is multiplied by
            it: 0.5 replays twice as fast, 2 half as fast.
        default_output_tokens: ``max_tokens`` of requests without ``output_tokens``.

    Raises:
        ConfigError: an empty trace, a bad ``time_scale``, duplicate or missing turn
            indices, a request earlier than the previous one of its session, or one
            ``prefix_key`` with two different prompts (messages name session and turn).
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(f"time_scale must be a finite number > 0, got {time_scale!r}")
    if default_output_tokens < 1:
        raise ConfigError(f"default_output_tokens must be ≥ 1, got {default_output_tokens!r}")
    if not records:
        raise ConfigError("trace: no records")
    sessions: dict[str, list[tuple[int, TraceRecord]]] = {}
    for i, r in enumerate(records):
        sessions.setdefault(r.session_id, []).append((i, r))
    origin = min(r.timestamp for r in records)
    prefixes: dict[str, str] = {}
    scripts: list[SessionScript] = []
    for sid, items in sessions.items():
        reqs = _ordered(sid, items)
        first = reqs[0]
        if first.system is None and first.prefix_blocks and first.prefix_key is None:
            # Blocks alone (Mooncake's): the ids are the key, the text is made when the
            # session starts — a trace's every prefix up front is (requests × prefix).
            size = first.block_tokens or DEFAULT_BLOCK_TOKENS
            blocks, system = first.prefix_blocks, ""
            key: str | None = f"blocks:{size}:" + "-".join(map(str, blocks))
        else:
            blocks, size = (), DEFAULT_BLOCK_TOKENS
            system, key = _system(first, prefixes)
        turns: list[TurnScript] = []
        for k, r in enumerate(reqs):
            tool_s = think_s = 0.0
            if k:
                prev = reqs[k - 1]
                if r.timestamp < prev.timestamp:
                    raise ConfigError(
                        f"trace: session {sid!r} turn {k}: timestamp {r.timestamp!r} is before "
                        f"the previous turn's {prev.timestamp!r}"
                    )
                if r.tool_s is not None or r.think_s is not None:
                    tool_s, think_s = r.tool_s or 0.0, r.think_s or 0.0
                else:
                    think_s = max(0.0, r.timestamp - prev.timestamp - (prev.duration_s or 0.0))
            text = r.message_text()
            turns.append(
                TurnScript(
                    text=text,
                    tokens=(r.input_tokens or 0) if text is None else 0,
                    max_tokens=r.output_tokens or default_output_tokens,
                    tool_s=tool_s * time_scale,
                    think_s=think_s * time_scale,
                )
            )
        scripts.append(
            SessionScript(
                session_id=sid,
                arrival_s=(first.timestamp - origin) * time_scale,
                agent=first.agent or "trace",
                system=system,
                prefix_blocks=blocks,
                block_tokens=size,
                system_key=key,
                turns=tuple(turns),
            )
        )
    scripts.sort(key=lambda s: s.arrival_s)  # stable: file order among equal arrivals
    return scripts


def _ordered(sid: str, items: list[tuple[int, TraceRecord]]) -> list[TraceRecord]:
    indexed = [r for _, r in items if r.turn is not None]
    if not indexed:
        return [r for _, r in items]
    if len(indexed) != len(items):
        raise ConfigError(f"trace: session {sid!r}: give turn on every request or on none")
    by_turn = sorted(indexed, key=lambda r: r.turn or 0)
    got = [r.turn for r in by_turn]
    if got != list(range(len(by_turn))):
        raise ConfigError(f"trace: session {sid!r}: turns must be 0, 1, 2 … once each, got {got}")
    return by_turn


def _system(first: TraceRecord, prefixes: dict[str, str]) -> tuple[str, str | None]:
    """A session's system prompt and its sharing key (one string per key, shared)."""
    if first.system is not None:
        system = first.system
    elif first.prefix_blocks:
        system = blocks_text(first.prefix_blocks, first.block_tokens or DEFAULT_BLOCK_TOKENS)
    elif first.prefix_tokens:
        system = synth_text(first.prefix_tokens, f"trace-prefix|{first.prefix_key}").lstrip()
    else:
        system = ""
    if first.prefix_key is None:
        if not system:
            return "", None
        # Equal prompts share one Agent (one prefix for the scheduler and router).
        return system, "sys:" + hashlib.blake2b(system.encode(), digest_size=8).hexdigest()
    seen = prefixes.setdefault(f"key:{first.prefix_key}", system)
    if seen != system:
        raise ConfigError(
            f"trace: session {first.session_id!r}: prefix_key {first.prefix_key!r} comes with "
            f"a different system prompt than an earlier session's"
        )
    return seen, f"key:{first.prefix_key}"
