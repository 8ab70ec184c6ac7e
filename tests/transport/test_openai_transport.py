"""The OpenAI-SDK transport sends through the user's client and yields the same trace."""

from __future__ import annotations

import asyncio
import contextlib

import httpx2
import openai
import pytest

from agentflow import (
    ConnectError,
    HTTPTransport,
    RateLimitError,
    ServerError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
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


async def test_the_callers_stream_options_are_sent() -> None:
    """The body's stream_options (the caller's keys plus include_usage) go out as the other
    transports send them: the SDK transport sent {"include_usage": True} alone, dropping
    vLLM's continuous_usage_stats."""
    req = ChatRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        params={"stream_options": {"continuous_usage_stats": True}},
    )
    async with ScriptedServer([Reply.text("a"), Reply.text("a")]) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0)
        await OpenAITransport(client, owns_client=True).stream(req)
        async with HTTPTransport(srv.base_url) as t:
            await t.stream(req)
        await client.close()
    via_sdk, direct = (r.body for r in srv.requests)
    assert via_sdk["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert via_sdk == direct


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


async def test_a_large_error_body_is_quoted_to_64_kib() -> None:
    """The SDK reads a 4 MiB error body whole; the error keeps its first 64 KiB, as
    HTTPTransport's does."""
    big = Reply(frames=[b"x" * (4 << 20)], status=500)
    async with ScriptedServer([big, big]) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        with pytest.raises(ServerError) as via_sdk:
            await OpenAITransport(client, owns_client=True).stream(REQ)
        await client.close()
        async with HTTPTransport(srv.base_url) as t:
            with pytest.raises(ServerError) as direct:
                await t.stream(REQ)
    assert via_sdk.value.body == direct.value.body
    assert 60_000 < len(via_sdk.value.body) <= 64 * 1024


class _Silent:
    """A server that reads each request and never answers; :meth:`close` ends it all."""

    def __init__(self) -> None:
        self.got_one = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.got_one.set()
            await asyncio.sleep(3600)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def close(self, server: asyncio.Server) -> None:
        server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await server.wait_closed()


async def test_an_sdk_timeout_names_the_part_that_ran_out() -> None:
    """Before any response: the SDK's read timeout is phase 'idle' with its limit and
    the trace so far; its pool timeout (the only connection is busy) is phase
    'connect' with the pool's limit — never a 0 s stand-in."""
    silent = _Silent()
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    try:
        client = openai.AsyncOpenAI(
            base_url=url, api_key="k", max_retries=0, timeout=httpx2.Timeout(None, read=0.3)
        )
        with pytest.raises(StreamTimeout) as read:
            await OpenAITransport(client, owns_client=True).stream(REQ)
        await client.close()
        assert (read.value.phase, read.value.timeout_s) == ("idle", 0.3)
        assert "read timeout of 0.3 s" in str(read.value)
        assert read.value.trace is not None and read.value.trace.chunk_ns == ()

        http = httpx2.AsyncClient(
            limits=httpx2.Limits(max_connections=1), timeout=httpx2.Timeout(None, pool=0.2)
        )
        client = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0, http_client=http)
        transport = OpenAITransport(client, owns_client=True)
        silent.got_one.clear()
        holder = asyncio.ensure_future(transport.stream(REQ))  # takes the one connection
        await asyncio.wait_for(silent.got_one.wait(), 60)
        with pytest.raises(StreamTimeout) as pool:
            await transport.stream(REQ)
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
        await transport.aclose()
        assert (pool.value.phase, pool.value.timeout_s) == ("connect", 0.2)
        assert "pool timeout of 0.2 s" in str(pool.value)
    finally:
        await silent.close(server)
