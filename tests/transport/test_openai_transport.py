"""The OpenAI-SDK transport sends through the user's client and yields the same trace."""

from __future__ import annotations

import httpx2
import openai
import pytest

from agentflow import (
    ConnectError,
    HTTPTransport,
    RateLimitError,
    StreamInterrupted,
    StreamProtocolError,
)
from agentflow.llamacpp import free_port
from agentflow.testing import Reply, ScriptedServer, sse_frames
from agentflow.transport import ChatRequest, OpenAITransport

REQ = ChatRequest(
    model="m",
    messages=[{"role": "user", "content": "hi"}],
    params={"max_tokens": 8, "top_k": 3},
    headers={"X-Session-ID": "s9"},
)


async def test_same_trace_as_the_default_transport() -> None:
    """Content, tool calls, usage and chunk count match HTTPTransport's for the same bytes."""
    replies = [Reply.tool_call("f", {"x": 1}), Reply.tool_call("f", {"x": 1})]
    async with ScriptedServer(replies) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0)
        via_sdk = await OpenAITransport(client, owns_client=True).stream(REQ)
        async with HTTPTransport(srv.base_url) as t:
            direct = await t.stream(REQ)
        await client.close()
    for a, b in ((via_sdk, direct),):
        assert a.tool_calls == b.tool_calls and a.usage == b.usage
        assert len(a.chunk_ns) == len(b.chunk_ns) and a.done and b.done
    body = srv.requests[0].body
    assert body["top_k"] == 3 and body["stream_options"] == {"include_usage": True}
    assert srv.requests[0].headers["X-Session-ID"] == "s9"
    assert srv.requests[0].headers["Authorization"] == "Bearer sk-test"


async def test_status_errors_map_to_agentflow_errors() -> None:
    """The SDK's 429 becomes agentflow's RateLimitError, Retry-After included."""
    async with ScriptedServer([Reply.error(429, "busy", {"Retry-After": "2"})]) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        with pytest.raises(RateLimitError) as info:
            await OpenAITransport(client).stream(REQ)
        await client.close()
    assert info.value.retry_after == 2.0 and "busy" in str(info.value)


async def test_cut_and_unfinished_streams() -> None:
    """A cut connection and a body without finish/[DONE] raise the same errors as HTTPTransport."""
    partial = sse_frames([{"choices": [{"index": 0, "delta": {"content": "p"}}]}], done=False)
    async with ScriptedServer([Reply(frames=partial, cut=True), Reply(frames=partial)]) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        t = OpenAITransport(client)
        with pytest.raises(StreamInterrupted):
            await t.stream(REQ)
        with pytest.raises(StreamProtocolError):
            await t.stream(REQ)
        await client.close()


async def test_connect_error() -> None:
    """Nothing listening: ConnectError."""
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k", max_retries=0
    )
    with pytest.raises(ConnectError):
        await OpenAITransport(client).stream(REQ)
    await client.close()


async def test_client_transport_seam() -> None:
    """respx patches `httpx`, but openai ≥ 3 is built on `httpx2`: the client's transport seam
    (`httpx2.MockTransport`) is where wire-format tests of the SDK path plug in."""
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=b"".join(Reply.text("via mock").frames),
        )

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)
    trace = await OpenAITransport(client, owns_client=True).stream(REQ)
    await OpenAITransport(client, owns_client=True).aclose()
    assert trace.content == "via mock"
    assert seen[0].url.path == "/v1/chat/completions"
