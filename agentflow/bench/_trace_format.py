"""agentflow's JSONL trace format (``docs/traces.md``): its records, their checks, the
reader and the writer, and the traces shipped with agentflow.

A trace is one JSON object per line, one line per *request* (a model turn):
:class:`TraceRecord`. Records of one session (``session_id``) are its turns, in
``turn`` order (or, without ``turn``, in file order). ``timestamp`` is when the request
arrived — was ready to send — in **seconds** from any origin (the trace's earliest
timestamp is the replay's start).

:func:`load_trace` also reads Mooncake's format (converted by ``_mooncake``). How the
records become the scripts a bench runs — trace replay — is ``_trace``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import msgspec

from agentflow._errors import ConfigError
from agentflow._session_checks import check_header_text
from agentflow.bench._workload_spec import MAX_TOKENS

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "SHIPPED_TRACES",
    "TRACE_FORMATS",
    "TraceMessage",
    "TraceRecord",
    "TraceSource",
    "load_trace",
    "read_trace",
    "shipped_trace",
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
    """Field checks msgspec's types do not express; messages name line and field.

    ``session_id`` and ``agent`` are checked as a run checks them (each goes into a
    request's ``X-Session-ID`` header: no control character but a tab, no lone
    surrogate), so a trace that reads is a trace that runs."""
    if not record.session_id:
        raise ConfigError(f"{where}: session_id must be a non-empty string")
    check_header_text(record.session_id, f"{where}: session_id")
    if record.agent:  # an agent's name starts its sessions' ids
        check_header_text(record.agent, f"{where}: agent")
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
    if record.prefix_blocks:
        size = record.block_tokens or DEFAULT_BLOCK_TOKENS
        total = len(record.prefix_blocks) * size
        if total > MAX_TOKENS:
            raise ConfigError(
                f"{where}: prefix_blocks: {len(record.prefix_blocks):,} blocks of {size:,} "
                f"tokens (block_tokens) are {total:,} tokens of system prompt; at most "
                f"{MAX_TOKENS:,}"
            )
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
    out); returns the number written.

    A path is written whole or not at all (:func:`~agentflow._files.open_text_output`):
    stopped part-way (an error from ``records``, Ctrl-C, SIGTERM), the file that was
    there is left as it was, never replaced by a shorter trace."""
    encoder = msgspec.json.Encoder()
    n = 0
    if isinstance(dest, str | Path):
        from agentflow._files import open_text_output

        with open_text_output(dest) as f:
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
