"""Frames: a request's output as vLLM-shaped chat-completion payloads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentflow.sim import Engine
from agentflow.sim.frames import DONE, ChunkEncoder, malformed_payload
from agentflow.sim.records import RequestRecord

from .simhttp import QUICK, TOOLS, user


def run_stream(
    messages: list[dict[str, Any]],
    *,
    k: int = 1,
    usage: bool = True,
    stream: bool = True,
    **kw: Any,
) -> tuple[list[list[bytes]], RequestRecord]:
    """Step an engine through one request; the payloads of each step."""
    engine = Engine(QUICK, seed=3)
    rid = engine.add_chat(messages, **kw)
    rec = engine.record(rid)
    assert rec.plan is not None
    enc = ChunkEncoder(
        request_id=f"chatcmpl-{rid}",
        model="m",
        created=123,
        plan=rec.plan,
        stream=stream,
        include_usage=usage,
        tokens_per_chunk=k,
    )
    steps: list[list[bytes]] = []
    while engine.has_work:
        step = engine.step()
        if rid in step.emitted:
            steps.append(enc.advance(rec))
    return steps, rec


def decoded(steps: list[list[bytes]]) -> list[Any]:
    return [p if p == DONE else json.loads(p) for ps in steps for p in ps]


def test_text_stream_shape() -> None:
    steps, rec = run_stream(user("tell me"), max_tokens=12)
    chunks = decoded(steps)
    assert chunks[-1] == DONE
    role, *content, finish, usage = chunks[:-1]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    for c in [role, *content, finish, usage]:
        assert c["id"] == "chatcmpl-0" and c["object"] == "chat.completion.chunk"
        assert c["created"] == 123 and c["model"] == "m"
    assert all(c["choices"][0]["finish_reason"] is None for c in content)
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert rec.plan is not None and text == rec.plan.text_of(0, 12)
    assert len(content) == 12  # one chunk per token, the role rides with the first
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": rec.prompt_tokens,
        "total_tokens": rec.prompt_tokens + 12,
        "completion_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    t = usage["timings"]
    assert t["predicted_n"] == 12 and t["prompt_n"] == rec.prompt_tokens
    assert {"prompt_ms", "predicted_ms", "predicted_per_second", "cache_n", "queue_ms"} <= set(t)
    assert t["preemptions"] == 0
    # Role and first token come in the same step; then one payload per step.
    assert len(steps) == 12 and len(steps[0]) == 2 and len(steps[-1]) == 4


def test_full_answer_ends_with_stop_and_the_end_token_sends_no_chunk() -> None:
    steps, rec = run_stream(user("a full answer"))
    chunks = decoded(steps)
    content = [c for c in chunks[1:-3]]
    assert rec.finish_reason == "stop"
    assert rec.plan is not None
    # The end token is zero-width: it produces no content chunk.
    assert len(content) == rec.completion_tokens - 1
    assert "".join(c["choices"][0]["delta"]["content"] for c in content) == rec.plan.text
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"


def test_no_usage_puts_timings_on_the_finish_chunk() -> None:
    steps, _ = run_stream(user("x"), usage=False, max_tokens=3)
    chunks = decoded(steps)
    assert chunks[-1] == DONE
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "length" and "timings" in finish
    assert all("usage" not in c for c in chunks[:-1])


@pytest.mark.parametrize("k", [2, 3, 5])
def test_tokens_per_chunk_groups_tokens(k: int) -> None:
    steps, rec = run_stream(user("group"), k=k, max_tokens=13)
    chunks = decoded(steps)
    content = chunks[1:-3]
    assert rec.plan is not None
    assert "".join(c["choices"][0]["delta"]["content"] for c in content) == rec.plan.text_of(0, 13)
    # The first token alone, then a chunk every k tokens, and the rest at the finish.
    assert len(content) == 1 + -(-12 // k)
    assert content[0]["choices"][0]["delta"]["content"] == rec.plan.text_of(0, 1)
    # Role and first token go out at once; content after every k tokens more and at the end.
    assert [i for i, ps in enumerate(steps) if ps] == sorted({0, *range(k, 13, k), 12})


def test_tool_call_deltas() -> None:
    steps, rec = run_stream(user("read it"), tools=TOOLS)
    assert rec.finish_reason == "tool_calls" and rec.plan is not None
    chunks = decoded(steps)
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-3]]
    calls = [d["tool_calls"] for d in deltas]
    assert all(len(c) == 1 and c[0]["index"] == 0 for c in calls)
    first, *rest = [c[0] for c in calls]
    call = rec.plan.tool_calls[0]
    assert first == {
        "index": 0,
        "id": call.id,
        "type": "function",
        "function": {"name": "read_file", "arguments": ""},
    }
    assert all(set(r) == {"index", "function"} for r in rest)
    assert "".join(r["function"]["arguments"] for r in rest) == call.arguments
    assert json.loads(call.arguments)["path"]
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"


def test_non_stream_body() -> None:
    steps, rec = run_stream(user("whole"), stream=False, max_tokens=9)
    assert [len(ps) for ps in steps[:-1]] == [0] * (len(steps) - 1)
    (body,) = steps[-1]
    b = json.loads(body)
    assert b["object"] == "chat.completion" and b["id"] == "chatcmpl-0"
    msg = b["choices"][0]["message"]
    assert rec.plan is not None and msg["content"] == rec.plan.text_of(0, 9)
    assert msg["role"] == "assistant" and msg["tool_calls"] == []
    assert b["choices"][0]["finish_reason"] == "length"
    assert b["usage"]["completion_tokens"] == 9 and "timings" in b


def test_non_stream_tool_call_body() -> None:
    steps, rec = run_stream(user("tool"), stream=False, tools=TOOLS)
    b = json.loads(steps[-1][0])
    msg = b["choices"][0]["message"]
    assert rec.plan is not None
    call = rec.plan.tool_calls[0]
    assert msg["content"] is None
    assert msg["tool_calls"] == [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": "read_file", "arguments": call.arguments},
        }
    ]
    assert b["choices"][0]["finish_reason"] == "tool_calls"


def test_json_escaping_of_content() -> None:
    # Newlines and quotes in the words must come out as valid JSON strings.
    steps, rec = run_stream(user("paragraphs"), max_tokens=400)
    text = "".join(
        c["choices"][0]["delta"].get("content", "")
        for c in decoded(steps)[1:-3]
        if isinstance(c, dict)
    )
    assert rec.plan is not None and text == rec.plan.text_of(0, rec.completion_tokens)


def test_malformed_payload_is_not_json() -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(malformed_payload("chatcmpl-1"))


def test_bad_tokens_per_chunk() -> None:
    engine = Engine(QUICK)
    rec = engine.record(engine.add_chat(user("x")))
    assert rec.plan is not None
    with pytest.raises(ValueError, match="tokens_per_chunk"):
        ChunkEncoder(request_id="a", model="m", created=0, plan=rec.plan, tokens_per_chunk=0)
