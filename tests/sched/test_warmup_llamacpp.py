"""Prefix warm-up against a real llama.cpp server: its prefix cache is per slot, so a
follower hits the leader's prefix only once the leader's request ended
(``Replica(prefix_shared_at="end")``); released at its first token, none does."""

from __future__ import annotations

import pytest

from agentflow import Agent, Fleet, HTTPTransport, Replica
from agentflow.llamacpp import LlamaCppServer

pytestmark = pytest.mark.llamacpp


async def _followers_cached(llamacpp: LlamaCppServer, shared_at: str) -> list[int]:
    # A prefix of its own (no other test's slot holds it): ~200 tokens.
    agent = Agent(
        name="warm",
        model="smollm2",
        instructions=f"Warm-up test ({shared_at}). " + "You are a helpful assistant. " * 30,
        params={"temperature": 0, "max_tokens": 4},
    )
    async with HTTPTransport(llamacpp.base_url) as http:
        replica = Replica(transport=http, prefix_shared_at=shared_at)  # type: ignore[arg-type]
        result = await Fleet(replica, max_concurrency=llamacpp.n_parallel).run(
            agent.session(f"Question {i}: what is {i} + {i}?") for i in range(llamacpp.n_parallel)
        )
    assert all(s.ok for s in result.sessions)
    first = sorted(result.sessions, key=lambda s: s.turns[0].metrics.cached_tokens or 0)
    return [s.turns[0].metrics.cached_tokens or 0 for s in first]


async def test_followers_hit_the_prefix_only_when_released_at_the_leaders_end(
    llamacpp: LlamaCppServer,
) -> None:
    at_end = await _followers_cached(llamacpp, "end")
    assert max(at_end) >= 150, at_end  # one follower reused the leader's slot
    at_first = await _followers_cached(llamacpp, "first_token")
    assert max(at_first) == 0, at_first  # each follower prefilled in another slot
