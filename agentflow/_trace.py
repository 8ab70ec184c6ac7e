"""What one streamed model turn looked like on the wire: the trace.

The transport produces a :class:`TurnTrace`; metrics, sessions and reports consume
it. All times are integers from the transport's clock (``time.perf_counter_ns`` by
default), taken when a read came off the socket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

__all__ = ["CacheSource", "PromptInfo", "ToolCall", "TurnTrace", "Usage"]

#: Where a cached-prompt-token figure came from.
#: ``prompt_tokens_details`` — vLLM, SGLang, OpenAI, llama.cpp;
#: ``prompt_cache_hit_tokens`` — DeepSeek's API.
CacheSource = Literal["prompt_tokens_details", "prompt_cache_hit_tokens"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token counts as the server reported them.

    ``None`` always means "the server did not say", never zero.
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    #: Prompt tokens served from the server's prefix cache, or ``None`` if not reported.
    cached_tokens: int | None = None
    #: Which field ``cached_tokens`` was read from.
    cached_source: CacheSource | None = None
    #: Of ``completion_tokens``, those spent reasoning (``completion_tokens_details``).
    reasoning_tokens: int | None = None

    def hidden_reasoning_tokens(self, reasoning: str) -> int:
        """The reasoning tokens the stream never showed: ``reasoning_tokens`` when
        reported and no reasoning text (``reasoning``, the streamed text) arrived — a model
        that keeps its reasoning hidden — else 0. They are counted in ``completion_tokens``
        but were decoded before the first visible chunk."""
        if reasoning or not self.reasoning_tokens or self.completion_tokens is None:
            return 0
        return min(self.reasoning_tokens, self.completion_tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptInfo:
    """What the client knew about a turn's prompt before sending it.

    Attributes:
        estimated_tokens: the local token estimate, corrected by calibration.
        raw_estimate: the same estimate before calibration.
        max_cacheable_tokens: the most prompt tokens any prefix cache could have served
            (leading token blocks already sent before, by any session), or ``None`` when
            prefixes were not fingerprinted.
    """

    estimated_tokens: int
    raw_estimate: int
    max_cacheable_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A tool call assembled from its streamed deltas."""

    index: int
    id: str
    name: str
    #: The raw JSON text of the arguments, exactly as the model produced it.
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnTrace:
    """One streamed chat-completions request, timestamped chunk by chunk.

    Attributes:
        sent_ns: when the request was handed to the socket, once its connection was open
            (``OpenAITransport``, and ``AiohttpTransport`` on a session of the user's:
            when the request was handed to the client, connecting included).
        headers_ns: when the response status line and headers arrived.
        end_ns: when the stream ended (``[DONE]`` or close).
        chunk_ns: the arrival time of every *output-bearing* chunk (content, reasoning
            or tool-call delta), in order. Role-only, empty and usage-only chunks are
            counted in ``n_events`` but not timed here.
        chunk_chars: characters of output each timed chunk carried (same length as ``chunk_ns``).
        chunk_tokens: tokens each timed chunk carried, when the server said (``logprobs``)
            or when the server's ``completion_tokens`` equals the number of chunks;
            otherwise apportioned: one each and the surplus by characters (all by
            characters when the count is below the chunks; ``docs/metrics.md``).
            ``tokens_exact`` says which.
        n_events: every SSE data event received, ``[DONE]`` excluded.
        done: whether ``data: [DONE]`` arrived.
        server_timings: llama.cpp-style ``timings`` object from the final chunk, if any.
        response_headers: the response's ``x-*`` headers (lower-cased names; credential
            values masked; a repeated header joined with ``", "``; a value that is not
            UTF-8 read as Latin-1), alike on every transport.
    """

    endpoint: str
    model: str | None
    response_id: str | None
    sent_ns: int
    headers_ns: int
    end_ns: int
    chunk_ns: tuple[int, ...]
    chunk_chars: tuple[int, ...]
    chunk_tokens: tuple[int, ...]
    tokens_exact: bool
    n_events: int
    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: Usage | None
    done: bool
    server_timings: dict[str, Any] | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    #: Connection attempts that failed before any response byte and were resent.
    reconnects: int = 0

    @property
    def first_output_ns(self) -> int | None:
        """Arrival time of the first output-bearing chunk, or ``None`` if there was none."""
        return self.chunk_ns[0] if self.chunk_ns else None

    def assistant_message(self) -> dict[str, Any]:
        """The OpenAI-format assistant message this turn adds to a conversation.

        A call's arguments that are not a JSON object (a turn cut by ``max_tokens``
        mid-call, ``'{"query": "long que'``; an empty string) are ``"{}"`` in it: vLLM
        parses every assistant call's arguments in the history, and refused the next
        request with a 400, ending the session where the model could have recovered from
        the call's ``Error: ...`` result. The text the model sent stays on the trace
        (:attr:`tool_calls`) and in that error. Equal turns give equal messages, byte for
        byte (the prefix cache).
        """
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _object_or_empty(c.arguments)},
                }
                for c in self.tool_calls
            ]
        elif msg["content"] is None:
            msg["content"] = ""
        return msg


def _object_or_empty(arguments: str) -> str:
    """``arguments`` when they are a JSON object, else ``"{}"``
    (:meth:`TurnTrace.assistant_message`)."""
    try:
        value = msgspec.json.decode(arguments)
    except RecursionError:  # nested too deep
        return "{}"
    except msgspec.DecodeError:
        # What msgspec refuses but Python's json takes (NaN, Infinity, 1e400) the tool was
        # called with, and a server parsing with json.loads (vLLM) takes too: kept.
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            return "{}"
    return arguments if isinstance(value, dict) else "{}"
