""":class:`HTTPTransport` end to end against a real llama.cpp server on loopback.

The same checks as ``test_llamacpp.py`` where the transport matters: a streamed turn,
llama.cpp's dropped kept-alive connections, a fleet on one pool, and agreement with
the aiohttp transport on a greedy completion.
"""

from __future__ import annotations

import pytest

from agentflow import Agent, Fleet, HTTPTransport, turn_metrics
from agentflow.llamacpp import LlamaCppServer
from agentflow.transport import AiohttpTransport, ChatRequest

pytestmark = pytest.mark.llamacpp

MODEL = "smollm2"


def ask(text: str, **params: object) -> ChatRequest:
    return ChatRequest(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        params={"temperature": 0, "max_tokens": 16, **params},
    )


async def test_one_streamed_turn(llamacpp: LlamaCppServer) -> None:
    """Text, finish, usage with cached tokens, the server's timings, TTFT."""
    async with HTTPTransport(llamacpp.base_url) as t:
        trace = await t.stream(ask("Name three colours."))
    assert trace.content and trace.done and trace.finish_reason in ("stop", "length")
    assert trace.usage is not None and trace.usage.prompt_tokens and trace.usage.completion_tokens
    assert trace.usage.cached_tokens is not None
    assert trace.server_timings is not None and trace.server_timings["predicted_n"] > 0
    m = turn_metrics(trace)
    assert m.output_tokens_source == "server_usage" and m.ttft_s is not None and m.ttft_s > 0


async def test_kept_alive_connection_drops_are_absorbed(llamacpp: LlamaCppServer) -> None:
    """llama.cpp closes connections after a stream (this build: nearly every one, despite
    its Keep-Alive header); 40 sequential turns all succeed through resends."""
    async with HTTPTransport(llamacpp.base_url) as t:
        traces = [await t.stream(ask(f"Say {i}.", max_tokens=2)) for i in range(40)]
        assert t.pool is not None
        print(f"40 sequential turns: {t.reconnects} resends, {t.pool.opened} connections opened")
        # At most one connection per attempt: a dropped one is never retried in place.
        assert t.pool.opened <= len(traces) + t.reconnects
    assert all(tr.usage is not None for tr in traces)
    assert sum(tr.reconnects for tr in traces) == t.reconnects


async def test_fleet_on_one_pool(llamacpp: LlamaCppServer) -> None:
    """8 sessions, 4 at a time, through one transport."""
    agent = Agent(name="n", model=MODEL, params={"temperature": 0, "max_tokens": 4})
    async with HTTPTransport(llamacpp.base_url) as t:
        result = await Fleet(t, max_concurrency=4).run(
            agent.session(f"What is {i} + {i}?") for i in range(8)
        )
    assert all(s.ok for s in result.sessions), [s.error for s in result.sessions]


async def test_same_completion_as_the_aiohttp_transport(llamacpp: LlamaCppServer) -> None:
    """Both transports read the same greedy completion, token for token.

    ``cache_prompt: false``: a prompt served from llama.cpp's cache takes another numeric
    path, which can change a greedy completion.
    """
    req = ask("Name a fruit.", max_tokens=12, cache_prompt=False)
    async with AiohttpTransport(llamacpp.base_url) as a, HTTPTransport(llamacpp.base_url) as b:
        via_aiohttp, via_protocol = await a.stream(req), await b.stream(req)
    assert via_protocol.content == via_aiohttp.content
    assert via_protocol.chunk_chars == via_aiohttp.chunk_chars
    assert via_protocol.usage is not None and via_aiohttp.usage is not None
    assert via_protocol.usage.completion_tokens == via_aiohttp.usage.completion_tokens
