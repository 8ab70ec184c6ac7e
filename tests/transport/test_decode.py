"""Chunks become a trace: text, reasoning, tool calls, usage in every provider's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentflow import ServerError, StreamProtocolError
from agentflow.transport import TraceBuilder, apportion
from agentflow.transport._stream import StreamState
from agentflow.typing import DeltaKind


def payload(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    chunk: dict[str, Any] = {"id": "c1", "model": "m", "choices": []}
    if delta is not None or finish is not None:
        chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    chunk.update(extra)
    return json.dumps(chunk).encode()


class Recorder:
    def __init__(self) -> None:
        self.deltas: list[tuple[str, str, int]] = []

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        self.deltas.append((kind, text, t_ns))


def build(payloads: list[bytes], sink: Recorder | None = None) -> TraceBuilder:
    b = TraceBuilder(endpoint="http://x/v1", sent_ns=1000, sink=sink)
    for i, p in enumerate(payloads):
        b.feed(p, 2000 + 100 * i)
    return b


def test_role_and_empty_chunks_are_not_output() -> None:
    """A role-only chunk and an empty delta carry no output: not timed, not a first token."""
    b = build(
        [payload({"role": "assistant", "content": ""}), payload({}), payload({"content": "Hi"})]
    )
    trace = b.finish(9000)
    assert trace.chunk_ns == (2200,)
    assert trace.n_events == 3
    assert trace.first_output_ns == 2200


def test_content_reasoning_and_sink() -> None:
    """Content and reasoning (both field names) are assembled and reach the sink in order."""
    rec = Recorder()
    b = build(
        [
            payload({"reasoning_content": "think "}),
            payload({"reasoning": "more"}),
            payload({"content": "Hello"}),
            payload({"content": " world"}, "stop"),
            b"[DONE]",
        ],
        rec,
    )
    trace = b.finish(99999)
    assert trace.reasoning == "think more"
    assert trace.content == "Hello world"
    assert trace.finish_reason == "stop"
    assert trace.done and trace.end_ns == 2400  # the [DONE] arrival, not the close
    assert [d[:2] for d in rec.deltas] == [
        ("reasoning", "think "),
        ("reasoning", "more"),
        ("content", "Hello"),
        ("content", " world"),
    ]


def test_tool_call_deltas_split_across_chunks() -> None:
    """Tool calls assemble from `index`-keyed deltas: id and name once, arguments in pieces."""
    b = build(
        [
            payload(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "a",
                            "type": "function",
                            "function": {"name": "add", "arguments": ""},
                        }
                    ]
                }
            ),
            payload({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}),
            payload({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "mul"}}]}),
            payload({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            payload({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
            payload({}, "tool_calls"),
        ]
    )
    trace = b.finish(5000)
    assert [(c.index, c.id, c.name, c.arguments) for c in trace.tool_calls] == [
        (0, "a", "add", '{"a": 1}'),
        (1, "b", "mul", "{}"),
    ]
    assert trace.finish_reason == "tool_calls"
    assert len(trace.chunk_ns) == 5


def test_usage_only_final_chunk_with_cached_tokens() -> None:
    """vLLM/SGLang/OpenAI/llama.cpp shape: `prompt_tokens_details.cached_tokens`."""
    usage = {
        "prompt_tokens": 600,
        "completion_tokens": 2,
        "total_tokens": 602,
        "prompt_tokens_details": {"cached_tokens": 512},
    }
    b = build([payload({"content": "a"}), payload({"content": "b"}, "stop"), payload(usage=usage)])
    u = b.finish(5000).usage
    assert u is not None
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (600, 2, 512)
    assert u.cached_source == "prompt_tokens_details"


def test_deepseek_cache_fields() -> None:
    """DeepSeek reports `prompt_cache_hit_tokens` / `prompt_cache_miss_tokens` instead."""
    usage = {"completion_tokens": 1, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36}
    u = build([payload({"content": "a"}, "stop"), payload(usage=usage)]).finish(1).usage
    assert u is not None
    assert (u.prompt_tokens, u.cached_tokens, u.cached_source) == (
        100,
        64,
        "prompt_cache_hit_tokens",
    )


def test_not_reported_is_none_not_zero() -> None:
    """Usage without cache fields leaves `cached_tokens` None; no usage at all leaves usage None."""
    u = build([payload(usage={"prompt_tokens": 5, "completion_tokens": 1})]).finish(1).usage
    assert u is not None
    assert u.cached_tokens is None and u.cached_source is None
    assert build([payload({"content": "a"}, "stop")]).finish(1).usage is None


def test_tokens_per_chunk_from_logprobs_are_exact() -> None:
    """When chunks carry logprobs, their entry count is the chunk's token count."""

    def lp(n: int) -> dict[str, object]:
        return {"content": [{"token": "t", "logprob": 0.0}] * n}

    chunks = [
        json.dumps(
            {"choices": [{"index": 0, "delta": {"content": "abc"}, "logprobs": lp(3)}]}
        ).encode(),
        json.dumps(
            {"choices": [{"index": 0, "delta": {"content": "d"}, "logprobs": lp(1)}]}
        ).encode(),
    ]
    trace = build(chunks).finish(1)
    assert trace.chunk_tokens == (3, 1) and trace.tokens_exact


def test_multi_token_chunks_are_apportioned_by_characters() -> None:
    """Without logprobs, server usage is split over chunks by characters (not exact)."""
    b = build(
        [
            payload({"content": "aaaa"}),
            payload({"content": "bb"}),
            payload({"content": "cc"}, "stop"),
            payload(usage={"completion_tokens": 8}),
        ]
    )
    trace = b.finish(1)
    assert trace.chunk_tokens == (4, 2, 2) and not trace.tokens_exact
    one_each = build(
        [
            payload({"content": "x"}),
            payload({"content": "y"}),
            payload(usage={"completion_tokens": 2}),
        ]
    ).finish(1)
    assert one_each.chunk_tokens == (1, 1) and one_each.tokens_exact


def test_a_token_more_than_chunks_leaves_no_chunk_without_a_token() -> None:
    """llama.cpp counts the end-of-sequence token, never streamed, in ``completion_tokens``:
    one more than its one-token chunks. Split by characters alone, that gave 0 tokens to the
    short chunks ("!", "?") and 2 to others; every chunk that carried output carried a
    token, so each gets 1 and only the surplus goes by characters."""
    pieces = ["Hello", "!", " How", " can", " I", " help", " you", " today", "?"]
    b = build(
        [payload({"content": p}) for p in pieces[:-1]]
        + [payload({"content": pieces[-1]}, "stop"), payload(usage={"completion_tokens": 10})]
    )
    trace = b.finish(1)
    assert trace.chunk_tokens == (1, 1, 1, 1, 1, 1, 1, 2, 1)  # the longest takes the EOS
    assert not trace.tokens_exact
    assert apportion(5, [1, 30]) == (1, 4)  # the surplus alone goes by characters
    # Fewer tokens than chunks (a server that under-counts): all split by characters.
    assert apportion(2, [1, 1, 10]) == (0, 0, 2)


def test_apportion_adds_up() -> None:
    """Largest-remainder rounding keeps the total; zero-character chunks weigh 1."""
    assert sum(apportion(10, [1, 1, 1])) == 10
    assert apportion(3, [0, 0, 0]) == (1, 1, 1)
    assert apportion(0, [5]) == (0,)


def test_malformed_json_raises_protocol_error_with_payload() -> None:
    """A chunk that is not JSON ends the stream with the offending bytes attached."""
    b = build([payload({"content": "ok"})])
    with pytest.raises(StreamProtocolError) as info:
        b.feed(b'{"choices": [', 5000)
    assert info.value.payload == b'{"choices": ['
    assert info.value.trace is not None and info.value.trace.content == "ok"


def test_error_object_inside_stream() -> None:
    """vLLM can send `{"error": {...}}` mid-stream: a ServerError with its code."""
    with pytest.raises(ServerError) as info:
        build(
            [
                payload({"content": "a"}),
                json.dumps({"error": {"message": "boom", "code": 503}}).encode(),
            ]
        )
    assert info.value.status == 503


_OUTPUT = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'


@pytest.mark.parametrize(
    ("bad", "cut"),
    [
        (b"data: {x\n\n", False),
        (b'data: {"choices": [], "usage": {"prompt_tokens": -1}}\n\n', False),
        (b'data: {"error": {"message": "boom", "code": 500}}\n\n', False),
        (b'data: {"cho', True),
    ],
    ids=["malformed", "implausible-usage", "error-in-stream", "cut-mid-event"],
)
def test_an_error_while_feeding_keeps_the_reconnects(bad: bytes, cut: bool) -> None:
    """The partial trace of an error raised inside the builder (a malformed chunk, bad
    usage, an event cut by the end of the body) said reconnects=0 after a resend."""
    state = StreamState("ep", iter(range(100)).__next__, reconnects=1)
    state.read(_OUTPUT, 1)
    if cut:
        state.read(bad, 2)
    with pytest.raises((StreamProtocolError, ServerError)) as info:
        state.end(3) if cut else state.read(bad, 2)
    err = info.value
    assert isinstance(err, StreamProtocolError | ServerError)
    trace = err.trace
    assert trace is not None and trace.content == "a" and trace.reconnects == 1
