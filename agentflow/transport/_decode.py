"""Chat-completion chunks → a :class:`TurnTrace`, one payload at a time.

This is the per-chunk hot path. Payloads are decoded by msgspec straight into
slotted structs that name only the fields agentflow reads (unknown fields are
skipped without being built); per chunk the builder appends a timestamp, a
character count and the text. Tokens per chunk, the assembled strings and the
tool calls are worked out once, in :meth:`TraceBuilder.finish`.

Usage figures are checked when they arrive (once per stream, off the per-chunk path):
a count that is not an integer, is negative, exceeds :data:`MAX_REPORTED_TOKENS`, or
contradicts another (more cached — ``prompt_tokens_details.cached_tokens`` or DeepSeek's
``prompt_cache_hit_tokens`` — than prompt tokens, more reasoning than completion tokens)
is a :class:`StreamProtocolError` naming the field and value — never a figure passed on to
metrics (a ``completion_tokens`` of 10**20 made a decode speed of 2e23 tokens/s).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from agentflow._errors import APIStatusError, StreamProtocolError
from agentflow._trace import CacheSource, TurnTrace, Usage
from agentflow.transport._status import api_status_error, stream_error_status
from agentflow.transport._surrogates import PairingSink, lenient_decode, mended, pairing
from agentflow.transport._tool_deltas import ToolCallDelta, ToolCalls
from agentflow.typing import DeltaSink

__all__ = ["MAX_REPORTED_TOKENS", "TraceBuilder", "apportion", "decode_json"]

T = TypeVar("T")

#: The largest token count a server's usage may report for one request: 100 million,
#: ten times the longest context window served today. Beyond it a figure is a bug.
MAX_REPORTED_TOKENS = 100_000_000


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None  # DeepSeek, SGLang, llama.cpp
    reasoning: str | None = None  # vLLM ≥ 0.10, OpenRouter
    tool_calls: list[ToolCallDelta] | None = None


class _Logprobs(msgspec.Struct):
    content: list[msgspec.Raw] | None = None  # one entry per token; only the count is read


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    prompt_cache_hit_tokens: int | None = None  # DeepSeek
    prompt_cache_miss_tokens: int | None = None  # DeepSeek


class _Chunk(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    timings: dict[str, Any] | None = None  # llama.cpp
    error: Any = None  # vLLM and others send {"error": {...}} inside an open stream


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


_TOO_DEEP = "JSON nested too deep to decode"


def decode_json(raw: bytes | str, decode: Callable[[bytes | str], T]) -> T:
    """JSON a server sent, read by ``decode`` (``msgspec.json.decode``, a ``Decoder``'s
    ``decode``): every way it can fail is a :class:`msgspec.DecodeError`.

    msgspec raises :class:`RecursionError`, not ``DecodeError``, for arrays or objects
    nested about 1000 deep (a few KB of ``[[[…``); that escaped every site reading a
    server's JSON as an error no caller expects. Every such site decodes through here
    (the stream's chunks catch both themselves: a call less per chunk).
    """
    try:
        return decode(raw)
    except RecursionError:
        raise msgspec.DecodeError(_TOO_DEEP) from None


class TraceBuilder:
    """Accumulates one stream; :meth:`feed` per payload, :meth:`finish` at the end."""

    __slots__ = (
        "_content",
        "_mend",
        "_reasoning",
        "_sink",
        "_token_counts",
        "_tools",
        "chunk_chars",
        "chunk_ns",
        "done",
        "done_ns",
        "endpoint",
        "finish_reason",
        "headers_ns",
        "model",
        "n_events",
        "reconnects",
        "response_id",
        "sent_ns",
        "timings",
        "usage",
    )

    def __init__(
        self, *, endpoint: str, sent_ns: int, sink: DeltaSink | None = None, reconnects: int = 0
    ) -> None:
        self.endpoint = endpoint
        self.reconnects = reconnects  # on the trace of an error raised while feeding
        self.sent_ns = sent_ns
        self.headers_ns = sent_ns
        self._sink = sink
        self.chunk_ns: list[int] = []
        self.chunk_chars: list[int] = []
        self._token_counts: list[int] | None = []  # None once a chunk lacks logprobs
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._tools = ToolCalls()  # the tool calls' deltas, put together: _tool_deltas.py
        self._mend: PairingSink | None = None  # set by a lone surrogate: finish() mends
        self.n_events = 0
        self.done = False
        self.done_ns = 0
        self.finish_reason: str | None = None
        self.usage: _Usage | None = None
        self.timings: dict[str, Any] | None = None
        self.model: str | None = None
        self.response_id: str | None = None

    def feed(self, payload: bytes, t_ns: int) -> None:
        """Take one SSE ``data`` payload that arrived at ``t_ns``."""
        if payload == b"[DONE]":
            self.done = True
            self.done_ns = t_ns
            return
        try:
            chunk = _decode_chunk(payload)  # (not through decode_json: a call less per chunk)
        except (msgspec.DecodeError, RecursionError) as error:
            exc = (
                error if isinstance(error, msgspec.DecodeError) else msgspec.DecodeError(_TOO_DEEP)
            )
            try:
                lenient = lenient_decode(payload, _Chunk)  # a lone UTF-16 surrogate: _surrogates.py
            except RecursionError:  # the standard library's parser has the same depth limit
                lenient = None
            if lenient is None:
                raise StreamProtocolError(
                    f"malformed chunk from {self.endpoint}: {exc}",
                    endpoint=self.endpoint,
                    trace=self.finish(t_ns, reconnects=self.reconnects),
                    payload=payload[:500],
                ) from None
            chunk = lenient
            self._sink = self._mend = pairing(self._sink)
        self.n_events += 1
        if chunk.error is not None:
            raise self._stream_error(chunk.error, t_ns)
        if self.response_id is None:
            self.response_id = chunk.id
            self.model = chunk.model
        if chunk.usage is not None:
            problem = _usage_problem(chunk.usage)
            if problem is not None:
                raise StreamProtocolError(
                    f"implausible usage from {self.endpoint}: {problem}",
                    endpoint=self.endpoint,
                    trace=self.finish(t_ns, reconnects=self.reconnects),
                    payload=payload[:500],
                )
            self.usage = chunk.usage
        if chunk.timings is not None:
            self.timings = chunk.timings
        if not chunk.choices:
            return
        choice = chunk.choices[0]  # agentflow asks for n=1
        delta = choice.delta
        if delta is not None:
            chars = 0
            sink = self._sink
            text = delta.content
            if text:
                self._content.append(text)
                chars = len(text)
                if sink is not None:
                    sink.on_delta("content", text, t_ns)
            text = delta.reasoning_content or delta.reasoning
            if text:
                self._reasoning.append(text)
                chars += len(text)
                if sink is not None:
                    sink.on_delta("reasoning", text, t_ns)
            if delta.tool_calls:
                chars += self._tools.add(delta.tool_calls, t_ns, sink)
            if chars or delta.tool_calls:
                self.chunk_ns.append(t_ns)
                self.chunk_chars.append(chars)
                counts = self._token_counts
                if counts is not None:
                    lp = choice.logprobs
                    if lp is not None and lp.content:
                        counts.append(len(lp.content))
                    else:
                        self._token_counts = None
        if choice.finish_reason is not None:
            self.finish_reason = choice.finish_reason

    def _stream_error(self, error: Any, t_ns: int) -> APIStatusError:
        """The error for an error object sent inside the stream, chosen by its code as an
        HTTP status would be, with what arrived before it."""
        status = stream_error_status(error)
        exc = api_status_error(
            status,
            error,
            self.endpoint,
            lead=f"{self.endpoint} reported an error (status {status}) inside the stream "
            f"after {len(self.chunk_ns)} output chunks",
        )
        exc.trace = self.finish(t_ns, reconnects=self.reconnects)
        return exc

    @property
    def has_output(self) -> bool:
        """Whether any output-bearing chunk has arrived."""
        return bool(self.chunk_ns)

    def finish(
        self, end_ns: int, *, reconnects: int = 0, headers: dict[str, str] | None = None
    ) -> TurnTrace:
        """Freeze what arrived into a :class:`TurnTrace`.

        The stream's end is when ``[DONE]`` arrived, else ``end_ns`` (the close).
        """
        usage = _usage(self.usage) if self.usage is not None else None
        n = len(self.chunk_ns)
        counts = self._token_counts
        if counts is not None and n and len(counts) == n:
            tokens, exact = tuple(counts), True
        elif usage is not None and usage.completion_tokens is not None and n:
            # reasoning the server reported but never streamed is in no chunk
            total = usage.completion_tokens - usage.hidden_reasoning_tokens(
                "".join(self._reasoning)
            )
            exact = total == n
            tokens = (1,) * n if exact else apportion(total, self.chunk_chars)
        else:
            tokens, exact = (1,) * n, False
        tools = self._tools.calls()
        trace = TurnTrace(
            endpoint=self.endpoint,
            model=self.model,
            response_id=self.response_id,
            sent_ns=self.sent_ns,
            headers_ns=self.headers_ns,
            end_ns=self.done_ns or end_ns,
            chunk_ns=tuple(self.chunk_ns),
            chunk_chars=tuple(self.chunk_chars),
            chunk_tokens=tokens,
            tokens_exact=exact,
            n_events=self.n_events,
            content="".join(self._content),
            reasoning="".join(self._reasoning),
            tool_calls=tools,
            finish_reason=self.finish_reason,
            usage=usage,
            done=self.done,
            server_timings=self.timings,
            response_headers=headers or {},
            reconnects=reconnects,
        )
        return trace if self._mend is None else mended(trace, self._mend, end_ns)


def apportion(total: int, weights: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """Split ``total`` tokens over output-bearing chunks by their characters.

    Every chunk that carried output carried at least one token: when ``total`` is at
    least the number of chunks, each gets 1 and only the surplus is split in proportion
    to the characters (llama.cpp's ``completion_tokens`` counts the end-of-sequence
    token, never streamed: one more than the chunks, which a plain split by characters
    gave as 0 to short chunks and 2 to long ones). With fewer tokens than chunks (a
    server that under-counts) the whole ``total`` is split by characters, and some
    chunks get 0. Largest-remainder rounding, so the parts always add up to ``total``;
    a chunk with no characters (a tool call's name-only delta) still weighs 1.
    """
    w = [max(x, 1) for x in weights]
    n = len(w)
    if not w or total <= 0:
        return (0,) * n
    base = 1 if total >= n else 0
    extra = total - base * n
    s = sum(w)
    raw = [extra * x / s for x in w]
    parts = [int(r) for r in raw]
    short = extra - sum(parts)
    for i in sorted(range(n), key=lambda i: parts[i] - raw[i])[:short]:
        parts[i] += 1
    return tuple(p + base for p in parts) if base else tuple(parts)


def _usage(u: _Usage) -> Usage:
    cached: int | None = None
    source: CacheSource | None = None
    if u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens is not None:
        cached, source = u.prompt_tokens_details.cached_tokens, "prompt_tokens_details"
    elif u.prompt_cache_hit_tokens is not None:
        cached, source = u.prompt_cache_hit_tokens, "prompt_cache_hit_tokens"
    prompt = u.prompt_tokens
    if (
        prompt is None
        and u.prompt_cache_hit_tokens is not None
        and (u.prompt_cache_miss_tokens is not None)
    ):
        prompt = u.prompt_cache_hit_tokens + u.prompt_cache_miss_tokens
    details = u.completion_tokens_details
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=u.completion_tokens,
        total_tokens=u.total_tokens,
        cached_tokens=cached,
        cached_source=source,
        reasoning_tokens=details.reasoning_tokens if details is not None else None,
    )


def _usage_problem(u: _Usage) -> str | None:
    """What is wrong with a usage object, or ``None`` (integer types msgspec has checked)."""
    pd, cd = u.prompt_tokens_details, u.completion_tokens_details
    fields = {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details.cached_tokens": pd.cached_tokens if pd is not None else None,
        "completion_tokens_details.reasoning_tokens": (
            cd.reasoning_tokens if cd is not None else None
        ),
        "prompt_cache_hit_tokens": u.prompt_cache_hit_tokens,
        "prompt_cache_miss_tokens": u.prompt_cache_miss_tokens,
    }
    for name, value in fields.items():
        if value is None:
            continue
        if value < 0:
            return f"usage.{name}={value} is negative"
        if value > MAX_REPORTED_TOKENS:
            return f"usage.{name}={value} is more than {MAX_REPORTED_TOKENS:,} tokens"
    # The cached count the trace takes (_usage): OpenAI's field, else DeepSeek's.
    cached_field = "prompt_tokens_details.cached_tokens"
    if fields[cached_field] is None:
        cached_field = "prompt_cache_hit_tokens"
    prompt, cached = u.prompt_tokens, fields[cached_field]
    if prompt is not None and cached is not None and cached > prompt:
        return f"usage.{cached_field}={cached} > prompt_tokens={prompt}"
    completion, reasoning = (
        u.completion_tokens,
        fields["completion_tokens_details.reasoning_tokens"],
    )
    if completion is not None and reasoning is not None and reasoning > completion:
        return (
            f"usage.completion_tokens_details.reasoning_tokens={reasoning} "
            f"> completion_tokens={completion}"
        )
    return None
