"""The real llama.cpp server's window and its "too long" answer (xllamacpp, SmolLM2).

Checked against the build agentflow installs: ``/v1/models`` reports each slot's
``n_ctx`` in ``meta`` (8,192 here: ``n_ctx=8192`` shared by 4 slots in one unified KV
cache); a longer prompt gets a 400 of type ``exceed_context_size_error`` with
``n_prompt_tokens`` and ``n_ctx``.
"""

from __future__ import annotations

import pytest

from agentflow import Agent, ContextLengthExceeded, ContextOverflow, Fleet, HTTPTransport
from agentflow.context import ContextBudget, server_window
from agentflow.llamacpp import LlamaCppServer
from agentflow.transport import ChatRequest

pytestmark = pytest.mark.llamacpp

MODEL = "smollm2"


async def test_the_window_is_the_slots_n_ctx(llamacpp: LlamaCppServer) -> None:
    async with HTTPTransport(llamacpp.base_url) as transport:
        found = await server_window(transport, model=MODEL)
        budget = await ContextBudget.from_server(transport, model=MODEL)
    assert found is not None
    assert (found.tokens, found.field, found.model) == (llamacpp.n_ctx, "meta.n_ctx", MODEL)
    assert budget.window == llamacpp.n_ctx
    assert budget.window_source == f"server {llamacpp.base_url} meta.n_ctx"


async def test_a_prompt_over_n_ctx_is_context_length_exceeded(llamacpp: LlamaCppServer) -> None:
    request = ChatRequest(
        model=MODEL,
        messages=[{"role": "user", "content": "hello world " * 6_000}],
        params={"max_tokens": 8},
    )
    async with HTTPTransport(llamacpp.base_url) as transport:
        with pytest.raises(ContextLengthExceeded) as info:
            await transport.stream(request)
    err = info.value
    assert err.status == 400 and err.limit == llamacpp.n_ctx
    assert err.prompt_tokens is not None and err.tokens == err.prompt_tokens > llamacpp.n_ctx
    assert err.body["error"]["type"] == "exceed_context_size_error"


async def test_a_budget_from_the_server_acts_before_the_server_would(
    llamacpp: LlamaCppServer,
) -> None:
    """The same oversized task with a budget over the server's window: the budget's own
    ContextOverflow ends the session before anything is sent."""
    async with HTTPTransport(llamacpp.base_url) as transport:
        budget = await ContextBudget.from_server(transport, model=MODEL, cache_buster=False)
        agent = Agent(name="a", model=MODEL, params={"max_tokens": 8}, context=budget)
        result = await Fleet(transport).run([agent.session("hello world " * 6_000)])
    session = result.sessions[0]
    assert isinstance(session.error, ContextOverflow)
    assert not isinstance(session.error, ContextLengthExceeded)
    assert session.error.limit == llamacpp.n_ctx and session.turns == []
