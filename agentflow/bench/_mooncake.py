"""A converter from Mooncake's trace format (FAST '25; also what AIPerf replays) to
agentflow's (``docs/traces.md``).

Mooncake's JSONL has one request per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, …]}

``timestamp`` is the arrival in milliseconds; ``hash_ids`` name the prompt's 512-token
blocks, so requests whose ``hash_ids`` start alike share that prompt prefix. AIPerf
adds optional fields: ``session_id`` (the rows of one session are its turns, in file
order; each later turn's ``input_length`` is what it appends to the history),
``delay`` (milliseconds between the previous response and this turn) and
``text_input`` (the prompt's text).

The conversion keeps the prefix sharing: each block id becomes a fixed 512-token
synthetic text, and a request's system prompt is the longest run of its leading blocks
that some other request also starts with (``prefix_blocks``: the ids, not the text, so
a converted trace stays small) — so sessions whose blocks were shared send
byte-identical prefixes and the server's prefix cache serves them; the rest of
``input_length`` is the request's own synthetic message (``input_tokens``). Lengths are
the trace's; a server's chat template adds a few tokens of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import msgspec

from agentflow._errors import ConfigError
from agentflow.bench._trace_format import (
    DEFAULT_BLOCK_TOKENS,
    TraceRecord,
    TraceSource,
    _lines,
)
from agentflow.bench._trace_format import _check as _check_record
from agentflow.bench._workload_spec import MAX_TOKENS

__all__ = ["MOONCAKE_BLOCK_TOKENS", "MooncakeRecord", "mooncake_records", "read_mooncake"]

#: Tokens per ``hash_ids`` block in Mooncake's traces.
MOONCAKE_BLOCK_TOKENS = DEFAULT_BLOCK_TOKENS


class MooncakeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a Mooncake trace (with AIPerf's optional fields).

    Attributes:
        timestamp: arrival in milliseconds (AIPerf: optional on a session's later turns).
        input_length: prompt tokens (on a session's later turns: tokens appended).
        output_length: response tokens.
        hash_ids: ids of the prompt's blocks of ``block`` tokens; equal leading ids are
            a shared prefix.
        session_id: the session (AIPerf); ``None``: a session of its own.
        delay: milliseconds between the previous response of its session and it.
        text_input: the prompt's text, sent instead of synthetic text.
    """

    timestamp: float | None = None
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()
    session_id: str | None = None
    delay: float | None = None
    text_input: str | None = None


def read_mooncake(
    source: str | Path | IO[str] | Iterable[str], *, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> list[TraceRecord]:
    """A Mooncake (or AIPerf mooncake_trace) JSONL file, as agentflow trace records.

    Raises:
        ConfigError: unreadable, or a line is not a valid Mooncake record (the message
            names the file, the line and the field).
    """
    name, lines = _lines(source, "mooncake trace")
    decoder = msgspec.json.Decoder(MooncakeRecord)
    rows: list[tuple[MooncakeRecord, TraceSource]] = []
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped:
            continue
        where = TraceSource(name, i)
        try:
            row = decoder.decode(stripped)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise ConfigError(f"{where}: not a JSON object: {exc}") from None
        _check(row, where)
        rows.append((row, where))
    return mooncake_records(rows, block_tokens=block_tokens)


def _check(row: MooncakeRecord, where: TraceSource) -> None:
    if row.input_length < 1:
        raise ConfigError(f"{where}: input_length must be ≥ 1, got {row.input_length}")
    if row.output_length < 0:
        raise ConfigError(f"{where}: output_length must be ≥ 0, got {row.output_length}")
    for name in ("input_length", "output_length"):  # a workload's bound (see _trace_format._check)
        value = getattr(row, name)
        if value > MAX_TOKENS:
            raise ConfigError(f"{where}: {name} must be ≤ {MAX_TOKENS:,}, got {value:,}")
    for name in ("timestamp", "delay"):
        value = getattr(row, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{where}: {name} must be a finite number ≥ 0, got {value!r}")


def mooncake_records(
    rows: Iterable[tuple[MooncakeRecord, TraceSource]] | Iterable[MooncakeRecord],
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> list[TraceRecord]:
    """Convert Mooncake rows (in file order) to agentflow trace records.

    Every record is checked as a line of an agentflow trace is (an empty
    ``session_id``, one with a control character): what converts is what
    :func:`~agentflow.bench.read_trace` reads back and a bench runs.

    Raises:
        ConfigError: a session's first row has no timestamp, a converted record is not
            a valid trace record (the message names the row's file, line and field), or
            ``block_tokens < 1``.
    """
    if block_tokens < 1:
        raise ConfigError(f"block_tokens must be ≥ 1, got {block_tokens!r}")
    items: list[tuple[MooncakeRecord, TraceSource]] = [
        r if isinstance(r, tuple) else (r, TraceSource("mooncake", i))
        for i, r in enumerate(rows, 1)
    ]
    named = {row.session_id for row, _ in items if row.session_id is not None}
    sids = [_sid(row, where, named) for row, where in items]
    firsts: set[str] = set()
    opening: list[tuple[int, ...]] = []  # the block ids of each session's first row
    for (row, _), sid in zip(items, sids, strict=True):
        if sid not in firsts:
            firsts.add(sid)
            opening.append(row.hash_ids)
    shared = _SharedPrefixes(opening)
    out: list[TraceRecord] = []
    last: dict[str, TraceRecord] = {}
    for (row, where), sid in zip(items, sids, strict=True):
        prev = last.get(sid)
        out_tokens = max(1, row.output_length)
        if prev is None:
            if row.timestamp is None:
                raise ConfigError(f"{where}: timestamp is required on a session's first row")
            k = shared.depth(row.hash_ids)
            # At least one token of the request's own; text_input is sent whole.
            k = min(k, (row.input_length - 1) // block_tokens) if row.text_input is None else 0
            ids = row.hash_ids[:k]
            own = row.input_length - k * block_tokens
            rec = TraceRecord(
                session_id=sid,
                timestamp=row.timestamp / 1e3,
                turn=0,
                text=row.text_input,
                input_tokens=None if row.text_input is not None else own,
                output_tokens=out_tokens,
                prefix_blocks=ids or None,
                block_tokens=None
                if block_tokens == DEFAULT_BLOCK_TOKENS or not ids
                else block_tokens,
                agent="mooncake",
            )
        else:
            if row.timestamp is not None:
                ts = row.timestamp / 1e3
            else:  # sent ``delay`` after the previous response: not before this
                ts = prev.timestamp + (row.delay or 0.0) / 1e3
            rec = TraceRecord(
                session_id=sid,
                timestamp=max(ts, prev.timestamp),
                turn=(prev.turn or 0) + 1,
                text=row.text_input,
                input_tokens=None if row.text_input is not None else row.input_length,
                output_tokens=out_tokens,
                think_s=row.delay / 1e3 if row.delay is not None else None,
                agent="mooncake",
            )
        _check_record(rec, str(where))
        last[sid] = rec
        out.append(rec)
    return out


def _sid(row: MooncakeRecord, where: TraceSource, named: set[str]) -> str:
    """A row's session: its ``session_id``, else one of its own — ``mooncake-LINE``, or
    ``mooncake-LINE~K`` if a row names a session that (it would have joined it)."""
    if row.session_id is not None:
        return row.session_id
    sid, k = f"mooncake-{where.line}", 0
    while sid in named:
        k += 1
        sid = f"mooncake-{where.line}~{k}"
    return sid


class _SharedPrefixes:
    """How many sequences start with each run of block ids (a trie of counts)."""

    def __init__(self, sequences: Iterable[tuple[int, ...]]) -> None:
        self._count: dict[tuple[int, int], int] = {}
        self._node: dict[tuple[int, int], int] = {}
        for ids in sequences:
            node = 0
            for block in ids:
                key = (node, block)
                self._count[key] = self._count.get(key, 0) + 1
                node = self._node.setdefault(key, len(self._node) + 1)

    def depth(self, ids: tuple[int, ...]) -> int:
        """The most leading blocks of ``ids`` that another sequence starts with too."""
        node, depth = 0, 0
        for block in ids:
            key = (node, block)
            if self._count.get(key, 0) < 2:
                break
            depth += 1
            node = self._node[key]
        return depth
