"""A server's "prompt too long" 4xx arrives as ContextLengthExceeded, with its numbers.

Against the simulator over HTTP (vLLM's wordings, its real status and body), on every
transport, and through a fleet: the error is a ContextOverflow and a BadRequestError,
carries the window and the requested tokens, and is sent once — never retried.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import aiohttp
import pytest

from agentflow import (
    Agent,
    BadRequestError,
    ContextLengthExceeded,
    ContextOverflow,
    Fleet,
    RetryPolicy,
)
from agentflow.sim import get_profile
from agentflow.sim.server import SimServer
from agentflow.transport import ChatRequest
from agentflow.transport._overflow import context_length_error, parse_context_length
from tests.transport.rawserver import KINDS, chunk, head, make_transport, raw_server

#: A fast simulated deployment with a 4,096-token window.
SMALL = dataclasses.replace(
    get_profile("cpu-tiny"),
    name="test-window",
    model="window-sim",
    kv_capacity_tokens=1 << 16,
    max_model_len=4096,
    max_num_batched_tokens=8192,
    per_agent_tps=1000.0,
)


def too_long(words: int, max_tokens: int | None = 16) -> ChatRequest:
    params: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
    return ChatRequest(
        model=SMALL.model,
        messages=[{"role": "user", "content": "cache " * words}],
        params=params,
    )


async def sim_count(sim: SimServer, request: ChatRequest) -> int:
    """The simulator's own count of ``request``'s prompt (``POST /tokenize``)."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{sim.url}/tokenize", json={"messages": request.messages}) as r,
    ):
        count: int = (await r.json())["count"]
    return count


@pytest.mark.parametrize("kind", KINDS)
async def test_a_prompt_over_the_window_is_context_length_exceeded(kind: str) -> None:
    async with SimServer(SMALL) as sim:
        request = too_long(5_000)
        prompt = await sim_count(sim, request)
        assert prompt > SMALL.max_model_len
        transport = make_transport(kind, sim.base_url)
        try:
            with pytest.raises(ContextLengthExceeded) as info:
                await transport.stream(request)
        finally:
            await transport.aclose()
    err = info.value
    assert isinstance(err, ContextOverflow) and isinstance(err, BadRequestError)
    assert (err.status, err.limit, err.tokens, err.prompt_tokens) == (400, 4096, prompt, prompt)
    assert err.output_tokens is None and err.session_id == ""
    assert "4,096-token context window" in str(err) and f"{prompt:,} tokens" in str(err)
    assert err.body["error"]["type"] == "BadRequestError"  # the server's body is kept


async def test_prompt_plus_max_tokens_over_the_window_counts_both() -> None:
    """vLLM's other wording: the prompt fits, but not with the output it asks for."""
    async with SimServer(SMALL) as sim:
        request = too_long(3_000, max_tokens=2_000)
        prompt = await sim_count(sim, request)
        assert prompt < SMALL.max_model_len < prompt + 2_000
        transport = make_transport("protocol", sim.base_url)
        try:
            with pytest.raises(ContextLengthExceeded) as info:
                await transport.stream(request)
        finally:
            await transport.aclose()
    err = info.value
    assert (err.limit, err.prompt_tokens, err.output_tokens) == (4096, prompt, 2_000)
    assert err.tokens == prompt + 2_000


class Counting:
    """A transport that counts what it sends."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent = 0

    @property
    def endpoint(self) -> str:
        return str(self.inner.endpoint)

    async def stream(self, request: ChatRequest, sink: Any = None) -> Any:
        self.sent += 1
        return await self.inner.stream(request, sink)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_fleet_never_retries_it_and_names_the_session() -> None:
    """Retries would resend the same prompt; the session fails at once with the numbers."""
    async with SimServer(SMALL) as sim:
        transport = Counting(make_transport("protocol", sim.base_url))
        agent = Agent(name="a", model=SMALL.model, params={"max_tokens": 16})
        retry = RetryPolicy(max_attempts=4, backoff_s=0.0, jitter=False)
        try:
            result = await Fleet(transport, retry=retry).run([agent.session("cache " * 5_000)])
        finally:
            await transport.aclose()
    session = result.sessions[0]
    assert transport.sent == 1
    assert session.status == "error" and isinstance(session.error, ContextLengthExceeded)
    assert session.error.session_id == session.session_id
    assert session.error.limit == 4096 and session.error.tokens > 4096


async def test_llamacpp_shaped_400_on_every_transport() -> None:
    """llama.cpp's error object (its numbers as fields), as the xllamacpp build sends it."""
    body = {
        "error": {
            "code": 400,
            "message": "request (3031 tokens) exceeds the available context size (2048 "
            "tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 3031,
            "n_ctx": 2048,
        }
    }
    payload = json.dumps(body).encode()

    async def answer(reader: Any, writer: Any) -> None:
        writer.write(head("application/json", status=400) + chunk(payload) + chunk(b""))
        await writer.drain()

    for kind in KINDS:
        async with raw_server(answer) as srv:
            transport = make_transport(kind, srv.base_url, connect_retries=0)
            try:
                with pytest.raises(ContextLengthExceeded) as info:
                    await transport.stream(too_long(10))
            finally:
                await transport.aclose()
        err = info.value
        assert (err.tokens, err.limit, err.prompt_tokens) == (3031, 2048, 3031), kind


async def test_other_400s_stay_bad_requests() -> None:
    async with SimServer(SMALL) as sim:
        transport = make_transport("protocol", sim.base_url)
        bad = ChatRequest(model=SMALL.model, messages=[{"role": "user", "content": "x"}],
                          params={"max_tokens": 0})  # fmt: skip
        try:
            with pytest.raises(BadRequestError) as info:
                await transport.stream(bad)
        finally:
            await transport.aclose()
    assert not isinstance(info.value, ContextOverflow)


VLLM_OLD = (
    "This model's maximum context length is 1000000 tokens. However, you requested 1018620 "
    "tokens (1017596 in the messages, 1024 in the completion). Please reduce the length of "
    "the messages or completion."
)
VLLM_NEW = (
    "This model's maximum context length is 131072 tokens. However, you requested 2048 output "
    "tokens and your prompt contains at least 130000 input tokens, for a total of at least "
    "132048 tokens. Please reduce the length of the input prompt or the number of requested "
    "output tokens."
)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (VLLM_OLD, (1_018_620, 1_000_000, 1_017_596, 1024)),
        (VLLM_NEW, (132_048, 131_072, 130_000, 2048)),
        (
            "This model's maximum context length is 4096 tokens. However, your request has "
            "5001 input tokens. Please reduce the length of the input messages.",
            (5001, 4096, 5001, None),
        ),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum "
            "context length is 4096 tokens and your request has 3001 input tokens "
            "(2000 > 4096 - 3001).",
            (5001, 4096, 3001, 2000),
        ),
        (
            "The decoder prompt (length 9000) is longer than the maximum model length of 8192. "
            "Make sure that `max_model_len` is no smaller than the number of text tokens.",
            (9000, 8192, 9000, None),
        ),
        (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130,511 tokens. Please reduce the length of the messages.",
            (130_511, 128_000, 130_511, None),
        ),
        (
            "The input (40000 tokens) is longer than the model's context length (32768 tokens).",
            (40_000, 32_768, 40_000, None),
        ),
    ],
)
def test_the_servers_wordings(message: str, expected: tuple[Any, ...]) -> None:
    body = {"error": {"message": message, "type": "BadRequestError", "code": 400}}
    assert parse_context_length(body, message) == expected


@pytest.mark.parametrize(
    "message",
    [
        "max_tokens must be at least 1, got 0.",
        "This model's maximum context length was exceeded.",  # no numbers: not mapped
        "This model's maximum context length is 4096 tokens.",  # no count of the request
    ],
)
def test_what_is_not_mapped(message: str) -> None:
    assert parse_context_length({"error": {"message": message}}, message) is None
    assert context_length_error(400, None, message, "http://x/v1") is None


def test_only_4xx_other_than_429_are_mapped() -> None:
    for status in (429, 500, 503):
        assert context_length_error(status, None, VLLM_OLD, "http://x/v1") is None
    for status in (400, 413, 422):
        assert isinstance(context_length_error(status, None, VLLM_OLD, "http://x/v1"),
                          ContextLengthExceeded)  # fmt: skip
