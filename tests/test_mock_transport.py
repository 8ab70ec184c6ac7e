"""testing.MockTransport: agents tested in-process, decoded as over the wire.

A reply given to MockTransport goes through the HTTP transports' SSE decoder, trace
builder and error mapping, so a fleet on it produces the traces, metrics, events and
exceptions a real server's bytes would. The comparison with ScriptedServer (real HTTP
on loopback) checks that claim field by field.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from agentflow import (
    Agent,
    AttemptDiscardedEvent,
    BadRequestError,
    ConfigError,
    ConnectError,
    ContextLengthExceeded,
    Fleet,
    HTTPTransport,
    RateLimitError,
    RetryEvent,
    RetryPolicy,
    ServerError,
    StreamInterrupted,
    StreamProtocolError,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
    UnexpectedContentType,
)
from agentflow.testing import MockTransport, Reply, ScriptedServer, capture_events
from agentflow.transport import ChatRequest


def get_price(sku: str) -> float:
    """Look up a product's price.

    Args:
        sku: the product's stock-keeping unit.
    """
    return {"A-1": 9.5, "B-2": 3.0}.get(sku, 0.0)


SHOP = Agent(name="shop", model="m", tools=[get_price], instructions="Answer with prices.")


def shop_handler(request: ChatRequest) -> Reply:
    """Asks for both prices on the first turn, answers once the tools have run."""
    if request.messages[-1]["role"] == "tool":
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        return Reply.text(f"A-1 costs {results[0]} and B-2 costs {results[1]}.")
    return Reply.stream(
        ["Let me ", "look."],
        tool_calls=[("get_price", {"sku": "A-1"}), ("get_price", {"sku": "B-2"})],
        prompt_tokens=40,
        cached_tokens=32,
    )


async def test_fleet_runs_a_tool_agent_in_process() -> None:
    """Two sessions with two tool calls each: the transcript, the requests the model
    saw, the events in order and the metrics from the replies' usage."""
    transport = MockTransport(shop_handler)
    events = capture_events()
    result = await Fleet(transport, callbacks=[events]).run(
        [SHOP.session("What do A-1 and B-2 cost?") for _ in range(2)]
    )
    assert [s.status for s in result.sessions] == ["completed", "completed"]
    for s in result.sessions:
        assert s.final_output == "A-1 costs 9.5 and B-2 costs 3.0."
        assert [m["role"] for m in s.messages] == [
            "system", "user", "assistant", "tool", "tool", "assistant",
        ]  # fmt: skip
        assert s.messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "9.5"}
        assert s.messages[4] == {"role": "tool", "tool_call_id": "call_2", "content": "3.0"}
        first = s.turns[0].metrics
        assert (first.prompt_tokens, first.cached_tokens, first.output_tokens) == (40, 32, 4)
        assert first.output_tokens_source == "server_usage"
        assert s.turns[1].metrics.output_tokens == 7  # one per word piece
        assert events.text(s.session_id) == "Let me look.A-1 costs 9.5 and B-2 costs 3.0."
    # The model got each tool's schema, and the tool results on its second turn.
    assert len(transport.requests) == 4
    assert [t["function"]["name"] for t in transport.requests[0].tools] == ["get_price"]
    second_turns = [r for r in transport.requests if r.messages[-1]["role"] == "tool"]
    assert len(second_turns) == 2
    # Events: one fleet start, per session 2 turns, 2 tool calls and results, one end.
    types = events.types()
    assert types[0] == "fleet_start" and types[-1] == "fleet_end"
    assert types.count("turn_end") == 4 and types.count("session_end") == 2
    calls = [e for e in events.of_type("tool_call") if isinstance(e, ToolCallEvent)]
    assert sorted(c.call.arguments for c in calls) == [
        '{"sku": "A-1"}', '{"sku": "A-1"}', '{"sku": "B-2"}', '{"sku": "B-2"}',
    ]  # fmt: skip
    results = [e for e in events.of_type("tool_result") if isinstance(e, ToolResultEvent)]
    assert sorted(r.output for r in results) == ["3.0", "3.0", "9.5", "9.5"]
    # Within a session: its tokens, then turn_end, then tool calls, then their results.
    sid = result.sessions[0].session_id
    mine = [e.type for e in events.for_session(sid) if e.type != "token"]
    assert mine == [
        "turn_end", "tool_call", "tool_call", "tool_result", "tool_result",
        "turn_end", "session_end",
    ]  # fmt: skip


async def test_same_reply_same_trace_as_over_http() -> None:
    """MockTransport and HTTPTransport on ScriptedServer build the same trace from one
    reply: text, tool calls, usage, tokens per chunk, events and finish reason."""
    replies = [
        Reply.text("one two three four five", pieces=2, prompt_tokens=12, cached_tokens=4),
        Reply.tool_call("get_price", {"sku": "A-1"}, pieces=4),
        Reply.stream(["a", "b"], reasoning=["think"], completion_tokens=9),
    ]
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    mock = MockTransport.scripted(replies)
    mock_traces = [await mock.stream(request) for _ in replies]
    mock.assert_complete()
    async with ScriptedServer(replies) as server, HTTPTransport(server.base_url) as http:
        http_traces = [await http.stream(request) for _ in replies]
    fields = (
        "content", "reasoning", "tool_calls", "usage", "chunk_tokens", "chunk_chars",
        "tokens_exact", "n_events", "finish_reason", "done", "model", "response_id",
    )  # fmt: skip
    for m, h in zip(mock_traces, http_traces, strict=True):
        assert {f: getattr(m, f) for f in fields} == {f: getattr(h, f) for f in fields}
    # 9 tokens over 3 chunks: one each, the other 6 apportioned by characters (5, 1, 1)
    assert mock_traces[2].chunk_tokens == (5, 2, 2)


async def test_error_statuses_map_as_over_http() -> None:
    """A 429 with Retry-After, a 503, a "too long" 400 and an HTML 200 become the same
    exceptions the HTTP transports raise."""
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    too_long = (
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"
    )
    transport = MockTransport.scripted(
        [
            Reply.error(429, "slow down", headers={"Retry-After": "7"}),
            Reply.error(503, "overloaded"),
            Reply.error(400, too_long),
            Reply(frames=[b"<html>proxy</html>"], headers={"Content-Type": "text/html"}),
        ]
    )
    with pytest.raises(RateLimitError) as limited:
        await transport.stream(request)
    assert (limited.value.status, limited.value.retry_after) == (429, 7.0)
    with pytest.raises(ServerError, match="overloaded") as down:
        await transport.stream(request)
    assert down.value.status == 503
    with pytest.raises(ContextLengthExceeded) as long:
        await transport.stream(request)
    assert long.value.status == 400
    with pytest.raises(UnexpectedContentType, match="text/html"):
        await transport.stream(request)


async def test_cut_drop_and_garbage_carry_partial_traces() -> None:
    """A cut reply is StreamInterrupted with what arrived; a drop is ConnectError; a
    malformed frame is StreamProtocolError with the partial trace."""
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    whole = Reply.text("alpha beta gamma")
    transport = MockTransport.scripted(
        [
            dataclasses.replace(whole, frames=whole.frames[:3], cut=True),
            Reply(drop=True),
            Reply(frames=[whole.frames[1], b"data: {not json\n\n"]),
            Reply(frames=whole.frames[:3]),  # ends without finish reason or [DONE]
        ]
    )
    with pytest.raises(StreamInterrupted) as cut:
        await transport.stream(request)
    assert cut.value.trace is not None and cut.value.trace.content == "alpha beta"
    with pytest.raises(ConnectError):
        await transport.stream(request)
    with pytest.raises(StreamProtocolError, match="malformed") as bad:
        await transport.stream(request)
    assert bad.value.trace is not None and bad.value.trace.content == "alpha"
    with pytest.raises(StreamProtocolError) as unfinished:
        await transport.stream(request)
    assert unfinished.value.unfinished


async def test_retried_turn_events_and_discarded_tokens() -> None:
    """A turn cut mid-stream is retried: its tokens are discarded (capture's text keeps
    only the successful attempt), and RetryEvent.attempt.error is the cut."""
    calls = 0

    async def handler(request: ChatRequest) -> Reply:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 1:
            partial = Reply.text("wrong answer that")
            return dataclasses.replace(partial, frames=partial.frames[:3], cut=True)
        return Reply.text("right answer")

    events = capture_events()
    agent = Agent(name="a", model="m")
    retry = RetryPolicy(backoff_s=0.001, jitter=False)
    result = await Fleet(MockTransport(handler), callbacks=[events], retry=retry).run(
        [agent.session("q")]
    )
    session = result.sessions[0]
    assert session.final_output == "right answer"
    assert events.text(session.session_id) == "right answer"
    discarded = [e for e in events if isinstance(e, AttemptDiscardedEvent)]
    assert len(discarded) == 1 and discarded[0].retried and discarded[0].content_chars == 12
    (retried,) = [e for e in events if isinstance(e, RetryEvent)]
    assert isinstance(retried.attempt.error, StreamInterrupted)
    assert retried.attempt.trace is not None and retried.attempt.trace.content == "wrong answer"
    (end,) = [e for e in events if isinstance(e, TurnEndEvent)]
    assert end.trace.content == "right answer"


async def test_capture_filter_builds_no_token_events() -> None:
    """capture_events("turn_end") declares event_types: the bus then builds no token
    events at all, and the capture holds only what it asked for."""
    only_ends = capture_events("turn_end")
    everything = capture_events()
    agent = Agent(name="a", model="m")
    transport = MockTransport(lambda _: Reply.text("w1 w2 w3"))
    await Fleet(transport, callbacks=[only_ends]).run([agent.session("q")])
    assert only_ends.types() == ["turn_end"]
    await Fleet(transport, callbacks=[everything]).run([agent.session("q")])
    assert everything.types().count("token") == 3


def test_handler_must_be_callable() -> None:
    """A non-callable handler is a ConfigError naming the field."""
    bad: Any = [Reply.text("x")]
    with pytest.raises(ConfigError, match=r"MockTransport\.handler"):
        MockTransport(bad)


async def test_scripted_assert_complete_counts_unused_replies() -> None:
    """assert_complete names how many replies were never requested; past the end is a 400
    (never retried) naming the request."""
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    transport = MockTransport.scripted([Reply.text("a"), Reply.text("b")])
    await transport.stream(request)
    with pytest.raises(AssertionError, match="1 scripted replies"):
        transport.assert_complete()
    await transport.stream(request)
    transport.assert_complete()
    with pytest.raises(BadRequestError, match="script exhausted: request 3 has no reply") as e:
        await transport.stream(request)
    assert e.value.status == 400
    # ... as its docstring says (it said a 500, which would be a retried ServerError)
    doc = " ".join((MockTransport.scripted.__doc__ or "").split())
    assert "answered with a 400, not retried" in doc and "500" not in doc


async def test_reply_usage_counts_the_chunks_it_sends() -> None:
    """Reply.text(pieces=k) sends k pieces; Reply.tool_call's completion_tokens is one
    per output chunk (its counts were pieces + 1 whatever it sent); empty text is 0."""
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    cases = [
        (Reply.text("a b c d e f g", pieces=4), 4),
        (Reply.text("a b c d e", pieces=2), 2),
        (Reply.text(""), 0),
        (Reply.tool_call("f", {}), 3),  # the call's first chunk, then "{", "}"
        (Reply.tool_call("f", {"x": 1}, pieces=10, prompt_tokens=500, cached_tokens=256), 9),
    ]
    mock = MockTransport.scripted([r for r, _ in cases])
    for _, chunks in cases:
        trace = await mock.stream(request)
        assert trace.usage is not None and trace.usage.completion_tokens == chunks
        assert len(trace.chunk_ns) == chunks
        assert trace.chunk_tokens == (1,) * chunks
    last = trace.usage
    assert last is not None and (last.prompt_tokens, last.cached_tokens) == (500, 256)


async def test_scripted_server_headers_stop_and_an_exhausted_script() -> None:
    """A reply's own Content-Type (any case) is the one sent; a script that runs out is
    a 400 (never retried: one request, the test fails at once, saying which); stop()
    leaves no handler behind an abandoned, slowed stream."""
    import aiohttp

    slow = Reply(frames=[b"data: {}\n\n"] * 50, frame_delay_s=0.05)
    json_page = Reply(frames=[b'{"a": 1}'], headers={"content-type": "application/json"})
    agent = Agent(name="a", model="m")
    async with ScriptedServer([json_page, slow]) as srv:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{srv.base_url}/chat/completions", json={}) as r:
                assert r.headers.getall("Content-Type") == ["application/json"]
            async with http.post(f"{srv.base_url}/chat/completions", json={}) as r:
                await r.content.readany()  # then abandoned mid-stream
        async with HTTPTransport(srv.base_url) as t:
            result = await agent.session("hi").run(t)
        assert isinstance(result.error, BadRequestError)
        assert "script exhausted: request 3 has no reply" in str(result.error)
        assert len(srv.requests) == 3
    assert srv.in_flight == 0 and srv.client_disconnects == 1
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not [t for t in pending if "_handle" in repr(t.get_coro())]
    assert ScriptedServer(host="::1").base_url == "http://[::1]:0/v1"  # a valid URL
