"""End to end against a real llama.cpp server on loopback."""

from __future__ import annotations

import openai
import pytest

from agentflow import Agent, Fleet, HTTPTransport, TurnTrace, turn_metrics
from agentflow.llamacpp import LlamaCppServer
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest, OpenAITransport
from agentflow.typing import DeltaSink

pytestmark = pytest.mark.llamacpp

MODEL = "smollm2"
# ~600 tokens of shared instructions, identical for every session.
SHARED = "You are a careful assistant for a software team. " + " ".join(
    f"Rule {i}: keep answers short, cite file names, and never invent APIs." for i in range(45)
)


def ask(text: str, **params: object) -> ChatRequest:
    return ChatRequest(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        params={"temperature": 0, "max_tokens": 16, **params},
    )


async def test_one_streamed_turn_reads_usage(llamacpp: LlamaCppServer) -> None:
    """A streamed turn: text, finish, usage with cached tokens reported, the server's timings."""
    async with HTTPTransport(llamacpp.base_url) as t:
        trace = await t.stream(ask("Name three colours."))
    assert trace.content and trace.done and trace.finish_reason in ("stop", "length")
    assert trace.usage is not None and trace.usage.prompt_tokens and trace.usage.completion_tokens
    assert trace.usage.cached_tokens is not None  # llama.cpp reports it, even when 0
    assert trace.server_timings is not None and trace.server_timings["predicted_n"] > 0
    m = turn_metrics(trace)
    assert m.output_tokens_source == "server_usage" and m.ttft_s is not None and m.ttft_s > 0


async def test_shared_prefix_hits_the_cache(llamacpp: LlamaCppServer) -> None:
    """8 sessions with one ~600-token system prompt: once warm, prompts come from the KV cache."""
    agent = Agent(
        name="team", model=MODEL, instructions=SHARED, params={"temperature": 0, "max_tokens": 4}
    )
    async with HTTPTransport(llamacpp.base_url) as t:
        first = await agent.run("warm up", t)
        result = await Fleet(t, max_concurrency=4).run(
            agent.session(f"Question {i}: what is {i} + {i}?") for i in range(8)
        )
    assert first.ok and all(s.ok for s in result.sessions)
    prompt = first.turns[0].metrics.prompt_tokens
    assert prompt is not None and prompt >= 550
    cached = [s.turns[0].metrics.cached_tokens or 0 for s in result.sessions]
    # llama.cpp caches per slot: each of its n_parallel slots may be filled cold once;
    # every other session finds the system prompt in a slot's cache.
    hits = sum(c >= 500 for c in cached)
    assert hits >= len(cached) - llamacpp.n_parallel, cached


class _FirstTurnsTo:
    """Send the first ``n`` turns to one transport and the rest to another."""

    def __init__(self, n: int, first: HTTPTransport, rest: HTTPTransport) -> None:
        self.n, self.first, self.rest, self.calls = n, first, rest, 0

    @property
    def endpoint(self) -> str:
        return self.rest.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        self.calls += 1
        t = self.first if self.calls <= self.n else self.rest
        return await t.stream(request, sink)

    async def aclose(self) -> None:
        await self.first.aclose()
        await self.rest.aclose()


async def test_tool_round_trip_continues_on_the_real_server(llamacpp: LlamaCppServer) -> None:
    """A scripted tool call (the 135M model cannot be relied on to make one), then llama.cpp
    accepts the assistant tool_calls + tool result messages and writes the final answer."""

    def lookup_weather(city: str) -> str:
        """Current weather for a city."""
        return f"{city}: 21 °C, sunny"

    agent = Agent(
        name="weather",
        model=MODEL,
        tools=[lookup_weather],
        params={"temperature": 0, "max_tokens": 24},
    )
    async with ScriptedServer([Reply.tool_call("lookup_weather", {"city": "Paris"})]) as srv:
        transport = _FirstTurnsTo(1, HTTPTransport(srv.base_url), HTTPTransport(llamacpp.base_url))
        result = await agent.run("Weather in Paris?", transport)
        await transport.aclose()
    assert result.ok, result.error
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.messages[2]["content"] == "Paris: 21 °C, sunny"
    assert result.final_output and len(result.turns) == 2
    assert result.turns[1].trace.usage is not None


async def test_decode_speed_is_measured_for_the_servers_tokens(llamacpp: LlamaCppServer) -> None:
    """For a 128-token completion the client counts the tokens llama.cpp says it predicted
    and derives a decode speed from them. How close 1/TPOT comes to the server's own
    ``predicted_per_second`` depends on the machine's load: ``benchmarks/fidelity.py``
    measures it (``docs/benchmarks.md``); the ratio is printed here, not asserted."""
    async with HTTPTransport(llamacpp.base_url) as t:
        await t.stream(ask("Warm up.", max_tokens=4))
        trace = await t.stream(
            ask("Write a long story about a lighthouse keeper.", max_tokens=128, ignore_eos=True)
        )
    m = turn_metrics(trace)
    assert m.output_tokens == 128 and m.decode_tps is not None and m.decode_tps > 0
    assert trace.server_timings is not None
    assert trace.server_timings["predicted_n"] == 128
    server_tps = trace.server_timings["predicted_per_second"]
    print(f"client decode {m.decode_tps:.1f} tok/s, server {server_tps:.1f} tok/s")


async def test_kept_alive_connection_drops_are_absorbed(llamacpp: LlamaCppServer) -> None:
    """llama.cpp drops some reused connections after a stream; 20 turns in a row all succeed."""
    async with HTTPTransport(llamacpp.base_url) as t:
        traces = [await t.stream(ask(f"Say {i}.", max_tokens=2)) for i in range(20)]
        print(f"reconnects over 20 sequential turns: {t.reconnects}")
    assert all(tr.usage is not None for tr in traces)
    assert sum(tr.reconnects for tr in traces) == t.reconnects


async def test_openai_transport_on_the_real_server(llamacpp: LlamaCppServer) -> None:
    """The SDK transport reads the same greedy completion as the default one (uncached:
    a prompt served from llama.cpp's cache takes another numeric path)."""
    req = ask("Name a fruit.", max_tokens=8, cache_prompt=False)
    client = openai.AsyncOpenAI(base_url=llamacpp.base_url, api_key="unused")
    via_sdk = await OpenAITransport(client, owns_client=True).stream(req)
    await client.close()
    async with HTTPTransport(llamacpp.base_url) as t:
        direct = await t.stream(req)
    assert via_sdk.content == direct.content
    assert via_sdk.usage is not None and direct.usage is not None
    assert via_sdk.usage.completion_tokens == direct.usage.completion_tokens
