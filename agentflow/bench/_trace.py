"""Trace replay: agentflow's JSONL trace format (``docs/traces.md``), its reader and
writer, and the mapping from a trace to the :class:`SessionScript` s the bench runner
executes.

A trace is one JSON object per line, one line per *request* (a model turn):
:class:`TraceRecord`. Records of one session (``session_id``) are its turns, in
``turn`` order (or, without ``turn``, in file order). ``timestamp`` is when the request
arrived — was ready to send — in **seconds** from any origin (the trace's earliest
timestamp is the replay's start).

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import msgspec

from agentflow._errors import ConfigError
from agentflow.bench._script import blocks_text
from agentflow.bench._spec import SessionScript, TurnScript, synth_text
from agentflow.bench._workload_spec import MAX_TOKENS

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

#: The trace formats ``load_trace`` (and ``agentflow bench --trace-format``) read.
TRACE_FORMATS = ("agentflow", "mooncake")

#: Traces shipped with agentflow (``agentflow/bench/traces/NAME.jsonl``): ``--trace NAME``.
SHIPPED_TRACES = ("agentic-small",)

_TRACES = Path(__file__).parent / "traces"

#: Tokens per block of ``prefix_blocks`` when a record gives no ``block_tokens``
#: (Mooncake's block size).
DEFAULT_BLOCK_TOKENS = 512

#: ``max_tokens`` of a replayed request whose record gives no ``output_tokens``.
DEFAULT_OUTPUT_TOKENS = 128


class TraceMessage(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """One chat message a request appended to its conversation (a tool result, a user
    message). A replay sends the contents of a request's messages, joined by a blank
    line, as one user message.

    Attributes:
        role: ``user``, ``tool``, ``system`` …
        content: its text.
        name: the tool's name, for a tool result.
    """

    role: str
    content: str = ""
    name: str | None = None


class TraceRecord(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """One request of a trace: one line of the JSONL file (``docs/traces.md``).

    Attributes:
        session_id: the conversation it belongs to.
        timestamp: when the request arrived (was ready to send), in seconds from any
            origin; the earliest in the trace is the replay's start.
        turn: its index in the session, from 0; ``None``: its place in the file.
        text: the message it appended (what a replay sends).
        messages: the messages it appended (a replay sends their contents joined);
            used when ``text`` is ``None``.
        input_tokens: tokens it appended; a replay synthesises that many when neither
            ``text`` nor ``messages`` is given.
        output_tokens: tokens the response had (a replay's ``max_tokens``).
        tool_s: seconds of tool latency between the previous response and this request.
        think_s: seconds of think time after the tool, before this request.
        duration_s: the recorded request's latency (arrival → last token); with the
            next request's timestamp it gives the gap a replay waits when the next
            request has neither ``tool_s`` nor ``think_s``.
        prompt_tokens: the whole prompt as the server counted it (recorded; a replay
            does not need it).
        system: the session's system prompt (on its first request).
        prefix_key: sessions with equal keys share one system prompt (the server's
            prefix cache sees one prefix).
        prefix_tokens: length of a synthetic shared system prompt, when neither
            ``system`` nor ``prefix_blocks`` is given.
        prefix_blocks: the system prompt as blocks: each id stands for a fixed
            ``block_tokens``-token synthetic text, so prompts whose block ids start alike
            share that prefix byte for byte (Mooncake's ``hash_ids``); when ``system`` is
            not given.
        block_tokens: tokens per block of ``prefix_blocks`` (default 512).
        agent: a label for per-agent figures (default ``"trace"``).
    """

    session_id: str
    timestamp: float
    turn: int | None = None
    text: str | None = None
    messages: tuple[TraceMessage, ...] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tool_s: float | None = None
    think_s: float | None = None
    duration_s: float | None = None
    prompt_tokens: int | None = None
    system: str | None = None
    prefix_key: str | None = None
    prefix_tokens: int | None = None
    prefix_blocks: tuple[int, ...] | None = None
    block_tokens: int | None = None
    agent: str | None = None

    def message_text(self) -> str | None:
        """What a replay appends: ``text``, or ``messages``' contents joined; ``None``
        when the record gives only a length."""
        if self.text is not None:
            return self.text
        if self.messages is not None:
            return "\n\n".join(m.content for m in self.messages)
        return None


_NONNEG_FLOATS = ("tool_s", "think_s", "duration_s")
_POS_INTS = ("input_tokens", "output_tokens", "block_tokens")
_NONNEG_INTS = ("turn", "prompt_tokens", "prefix_tokens")
#: Lengths a replay synthesises or asks for: bounded as a workload's are (a typo there
#: would hang the bench building text or exhaust its memory).
_BOUNDED = ("input_tokens", "output_tokens", "prefix_tokens", "block_tokens")


def _check(record: TraceRecord, where: str) -> None:
    """Field checks msgspec's types do not express; messages name line and field."""
    if not record.session_id:
        raise ConfigError(f"{where}: session_id must be a non-empty string")
    if not math.isfinite(record.timestamp):
        raise ConfigError(f"{where}: timestamp must be a finite number, got {record.timestamp!r}")
    for name in _NONNEG_FLOATS:
        value = getattr(record, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{where}: {name} must be a finite number ≥ 0, got {value!r}")
    for name in _POS_INTS:
        value = getattr(record, name)
        if value is not None and value < 1:
            raise ConfigError(f"{where}: {name} must be ≥ 1, got {value!r}")
    for name in _NONNEG_INTS:
        value = getattr(record, name)
        if value is not None and value < 0:
            raise ConfigError(f"{where}: {name} must be ≥ 0, got {value!r}")
    for name in _BOUNDED:
        value = getattr(record, name)
        if value is not None and value > MAX_TOKENS:
            raise ConfigError(f"{where}: {name} must be ≤ {MAX_TOKENS:,}, got {value:,}")
    if record.message_text() is None and record.input_tokens is None:
        raise ConfigError(f"{where}: give text, messages or input_tokens (the request's input)")


@dataclass(frozen=True, slots=True)
class TraceSource:
    """Where a record came from, for error messages: ``name:line``."""

    name: str
    line: int

    def __str__(self) -> str:
        return f"{self.name}:{self.line}"


def read_trace(source: str | Path | IO[str] | Iterable[str]) -> list[TraceRecord]:
    """The records of an agentflow JSONL trace (a path, an open text file, or lines).

    Blank lines and lines starting with ``#`` are skipped.

    Raises:
        ConfigError: unreadable, or a line is not a valid record; the message names the
            file, the line number and the field (``trace.jsonl:3: Expected `float`,
            got `str` - at `$.timestamp```).
    """
    return [r for r, _ in _read_lines(source)]


def _read_lines(
    source: str | Path | IO[str] | Iterable[str],
) -> list[tuple[TraceRecord, TraceSource]]:
    name, lines = _lines(source, "trace")
    decoder = msgspec.json.Decoder(TraceRecord)
    out: list[tuple[TraceRecord, TraceSource]] = []
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = TraceSource(name, i)
        try:
            record = decoder.decode(stripped)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise ConfigError(f"{where}: not a JSON object: {exc}") from None
        _check(record, str(where))
        out.append((record, where))
    return out


def _lines(source: str | Path | IO[str] | Iterable[str], what: str) -> tuple[str, list[str]]:
    """A trace's name and lines; a UTF-8 byte-order mark (Windows editors, PowerShell's
    ``Out-File``) is not part of the first line."""
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            return path.name, path.read_text(encoding="utf-8-sig").splitlines()
        except OSError as exc:
            raise ConfigError(f"{what} file {str(source)!r}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{what} file {str(source)!r}: not UTF-8 text: {exc}") from None
    name = getattr(source, "name", what)
    lines = list(source)
    if lines and lines[0].startswith("\ufeff"):  # a text file opened as utf-8
        lines[0] = lines[0][1:]
    return (name if isinstance(name, str) else what), lines


def write_trace(records: Iterable[TraceRecord], dest: str | Path | IO[str]) -> int:
    """Write ``records`` as JSONL (one object per line, fields at their defaults left
    out); returns the number written."""
    encoder = msgspec.json.Encoder()
    n = 0
    if isinstance(dest, str | Path):
        with Path(dest).open("w", encoding="utf-8") as f:
            return write_trace(records, f)
    for record in records:
        dest.write(encoder.encode(record).decode() + "\n")
        n += 1
    return n


def shipped_trace(name: str) -> Path:
    """The path of a trace shipped with agentflow (one of :data:`SHIPPED_TRACES`).

    Raises:
        ConfigError: no such trace.
    """
    if name not in SHIPPED_TRACES:
        raise ConfigError(
            f"no shipped trace {name!r}; the shipped ones: {', '.join(SHIPPED_TRACES)}"
        )
    return _TRACES / f"{name}.jsonl"


def load_trace(
    path: str | Path,
    *,
    format: Literal["agentflow", "mooncake"] = "agentflow",
) -> list[TraceRecord]:
    """A trace file's records: agentflow's format, or converted from ``mooncake``'s
    (:func:`~agentflow.bench.read_mooncake`). A shipped trace's name (not a file)
    means that trace.

    Raises:
        ConfigError: an unknown format, or a bad file (the message names the line).
    """
    if str(path) in SHIPPED_TRACES and not Path(path).exists():
        path = shipped_trace(str(path))
    if format == "agentflow":
        return read_trace(path)
    if format == "mooncake":
        from agentflow.bench._mooncake import read_mooncake

        return read_mooncake(path)
    raise ConfigError(f"trace format must be one of {', '.join(TRACE_FORMATS)}, got {format!r}")


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
