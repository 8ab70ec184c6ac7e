"""A request's output as OpenAI chat-completion payloads, shaped like vLLM's.

:class:`ChunkEncoder` turns what the engine produced for one request (its
:class:`~agentflow.sim.records.RequestRecord`, read after each step) into the JSON
payloads of an SSE stream — the bytes after ``data: `` — or, for a non-streaming
request, into the one ``chat.completion`` body. The stream, as vLLM sends it::

    {"id":"chatcmpl-7","object":"chat.completion.chunk","created":…,"model":…,
     "choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,
                 "finish_reason":null}]}                                # role, with token 1
    {…"choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,
                  "finish_reason":null}]}                               # one per chunk
    {…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_…",
        "type":"function","function":{"name":"f","arguments":""}}]},…}]}  # a call opens
    {…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,
        "function":{"arguments":"{\\"a\\""}}]},…}]}                      # its arguments
    {…"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop",
                  "stop_reason":null}]}                                 # finish
    {…"choices":[],"usage":{"prompt_tokens":…,"completion_tokens":…,"total_tokens":…,
        "prompt_tokens_details":{"cached_tokens":…}},"timings":{…}}     # include_usage
    [DONE]

``timings`` is llama.cpp's block (``prompt_n``, ``prompt_ms``, ``predicted_n``,
``predicted_ms``, ``predicted_per_second``, ``cache_n``) plus the simulator's
``queue_ms`` and ``preemptions``; without ``include_usage`` it rides on the finish chunk.

Cost: the constant head of every chunk (``id``, ``created``, ``model``) is encoded once
per request, and the JSON string of each token's text once per process (a bounded
cache; the word list makes hits the rule), so a content chunk is one dictionary lookup
and two byte concatenations. ``tokens_per_chunk`` K > 1 groups tokens into one chunk as
speculative decoding and vLLM's stream interval do: the first token goes out alone as
soon as it exists (so the client's TTFT is the engine's), then a chunk every K tokens,
and the last group is flushed at the finish whatever its size — 1 + ⌈(n − 1)/K⌉ chunks
for n tokens.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentflow._counts import check_count
from agentflow.sim.plan import OutputPlan
from agentflow.sim.records import RequestRecord

__all__ = ["DONE", "ChunkEncoder", "malformed_payload", "usage_of"]

#: The payload that ends a stream.
DONE = b"[DONE]"

_encode = msgspec.json.encode
_CHOICE_END = b',"logprobs":null,"finish_reason":null}]}'
_CONTENT_END = b"}" + _CHOICE_END
_MAX_CACHED = 1 << 16
# JSON string literals of token texts, shared by every request of the process.
_escaped: dict[str, bytes] = {}


def _esc(text: str) -> bytes:
    b = _escaped.get(text)
    if b is None:
        b = _encode(text)
        if len(_escaped) >= _MAX_CACHED:
            _escaped.clear()
        _escaped[text] = b
    return b


def usage_of(record: RequestRecord) -> dict[str, Any]:
    """The ``usage`` object of a request, vLLM's fields (cached tokens always reported)."""
    completion = record.completion_tokens
    return {
        "prompt_tokens": record.prompt_tokens,
        "total_tokens": record.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": record.cached_tokens or 0},
    }


def malformed_payload(request_id: str) -> bytes:
    """A payload that starts like a chunk and is not valid JSON (a fault)."""
    return b'{"id":' + _encode(request_id) + b',"object":"chat.completion.chunk","choices":[{"ind'


class ChunkEncoder:
    """Encodes one request's output, step by step, as the payloads a client reads.

    Args:
        request_id: the response id (``chatcmpl-<n>``).
        model: the model name the response reports.
        created: the ``created`` Unix time.
        plan: the request's output plan (``engine.record(rid).plan``).
        stream: ``False`` gives one ``chat.completion`` body at the finish instead.
        include_usage: a usage-only chunk before ``[DONE]`` (``stream_options.include_usage``).
        tokens_per_chunk: output tokens per content chunk (≥ 1) after the first token,
            which is sent alone; the last chunk may have fewer.
    """

    __slots__ = (
        "_choice_head",
        "_content_head",
        "_created",
        "_fast",
        "_head",
        "_k",
        "_model",
        "_offsets",
        "_plan",
        "_sent",
        "_started",
        "_text",
        "_tools",
        "include_usage",
        "request_id",
        "stream",
    )

    def __init__(
        self,
        *,
        request_id: str,
        model: str,
        created: int,
        plan: OutputPlan,
        stream: bool = True,
        include_usage: bool = False,
        tokens_per_chunk: int = 1,
    ) -> None:
        check_count(tokens_per_chunk, "tokens_per_chunk")
        self.request_id = request_id
        self.stream = stream
        self.include_usage = include_usage
        self._model = model
        self._created = created
        self._plan = plan
        self._text = plan.text
        self._offsets = plan.offsets
        self._tools = bool(plan.tool_calls)
        self._k = tokens_per_chunk
        self._sent = 0
        self._started = False
        self._fast = False  # set once the role chunk is out: one text token per chunk
        self._head = (
            b'{"id":'
            + _encode(request_id)
            + b',"object":"chat.completion.chunk","created":'
            + str(int(created)).encode()
            + b',"model":'
            + _encode(model)
            + b","
        )
        self._choice_head = self._head + b'"choices":[{"index":0,"delta":'
        self._content_head = self._choice_head + b'{"content":'

    @property
    def tokens_sent(self) -> int:
        """Output tokens already encoded into payloads."""
        return self._sent

    def advance(self, record: RequestRecord) -> list[bytes]:
        """The payloads for what ``record`` produced since the last call (maybe none).

        Call it after each step that emitted a token for this request; at the finish it
        adds the finish chunk, the usage chunk and ``[DONE]`` (for a non-streaming
        request: the whole ``chat.completion`` body, and nothing before).
        """
        n = len(record.token_times_s)
        s = self._sent
        finished = record.finish_reason is not None
        if self._fast and n == s + 1 and not finished:
            # The hot path: one token of text, one chunk.
            self._sent = n
            o = self._offsets
            t = self._text[o[s] : o[n]]
            if not t:
                return []
            b = _escaped.get(t)
            return [self._content_head + (b if b is not None else _esc(t)) + _CONTENT_END]
        if not self.stream:
            if not finished:
                return []
            self._sent = n
            return [self.completion_body(record)]
        out: list[bytes] = []
        if not self._started:
            self._started = True
            self._fast = self._k == 1 and not self._tools
            out.append(self._choice_head + b'{"role":"assistant","content":""}' + _CHOICE_END)
        k = self._k
        # The first output goes out as soon as it exists (vLLM's stream interval sends
        # when finished, at the first token, or every k tokens): holding it for k tokens
        # would make the client's TTFT k − 1 steps late.
        if s == 0 < n:
            k = n
        if n - s >= k or (finished and n > s):
            if self._tools:
                while n - s >= k or (finished and n > s):
                    e = min(n, s + k)
                    k = self._k
                    p = self._tool_payload(s, e)
                    if p is not None:
                        out.append(p)
                    s = e
            else:
                o = self._offsets
                text = self._text
                head = self._content_head
                while n - s >= k or (finished and n > s):
                    e = min(n, s + k)
                    k = self._k
                    t = text[o[s] : o[e]]
                    if t:
                        out.append(head + _esc(t) + _CONTENT_END)
                    s = e
            self._sent = s
        if finished:
            out.extend(self.final_payloads(record))
        return out

    def content_payload(self, start: int, end: int) -> bytes | None:
        """The chunk for output tokens ``[start, end)``, or ``None`` if they say nothing."""
        if self._tools:
            return self._tool_payload(start, end)
        o = self._offsets
        text = self._text[o[start] : o[end]]
        return self._content_head + _esc(text) + _CONTENT_END if text else None

    def _tool_payload(self, start: int, end: int) -> bytes | None:
        delta = self._plan.delta(start, end)
        d: dict[str, Any] = {}
        if delta.content:
            d["content"] = delta.content
        if delta.tool_calls:
            calls: list[dict[str, Any]] = []
            for tc in delta.tool_calls:
                if tc.id is not None:
                    calls.append(
                        {
                            "index": tc.index,
                            "id": tc.id,
                            "type": "function",
                            "function": {"name": tc.name, "arguments": tc.arguments},
                        }
                    )
                else:
                    calls.append({"index": tc.index, "function": {"arguments": tc.arguments}})
            d["tool_calls"] = calls
        if not d:
            return None
        return self._choice_head + _encode(d) + _CHOICE_END

    def final_payloads(self, record: RequestRecord) -> list[bytes]:
        """The finish chunk, the usage chunk (if asked for) and ``[DONE]``."""
        reason = _encode(record.finish_reason or "stop")
        timings = _encode(record.timings())
        finish = (
            self._choice_head
            + b'{},"logprobs":null,"finish_reason":'
            + reason
            + b',"stop_reason":null}]'
        )
        if not self.include_usage:
            return [finish + b',"timings":' + timings + b"}", DONE]
        usage = (
            self._head
            + b'"choices":[],"usage":'
            + _encode(usage_of(record))
            + b',"timings":'
            + timings
            + b"}"
        )
        return [finish + b"}", usage, DONE]

    def completion_body(self, record: RequestRecord) -> bytes:
        """The non-streaming ``chat.completion`` body of a finished request."""
        n = record.completion_tokens
        delta = self._plan.delta(0, n)
        calls = [
            {
                "id": tc.id or f"call_{tc.index}",
                "type": "function",
                "function": {"name": tc.name or "", "arguments": tc.arguments},
            }
            for tc in delta.tool_calls
        ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": delta.content if delta.content or not calls else None,
            "reasoning_content": None,
            "tool_calls": calls,
        }
        body = {
            "id": self.request_id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": record.finish_reason or "stop",
                    "stop_reason": None,
                }
            ],
            "usage": usage_of(record),
            "timings": record.timings(),
        }
        return _encode(body)
