"""``tokens_per_chunk`` K > 1 (vLLM's stream interval): the first token is not held back.

vLLM sends a request's output when it finishes, at its first token, or once K tokens
have gathered since the last send; so a client's TTFT is the engine's, whatever K is.
Holding the first token until K had gathered made every TTFT K − 1 decode steps late.
"""

from __future__ import annotations

import json
import math

import pytest

from agentflow._request import ChatRequest
from agentflow.embedded import SimTransport, run_virtual
from agentflow.sim import Engine
from agentflow.sim.driver import EngineDriver
from agentflow.sim.frames import DONE, ChunkEncoder

from .simhttp import QUICK, TOOLS, user


@pytest.mark.parametrize("k", [1, 4, 8])
def test_client_ttft_is_the_engine_ttft_and_chunks_group_after_the_first(k: int) -> None:
    n = 21

    async def main() -> None:
        driver = EngineDriver(Engine(QUICK, seed=2), tokens_per_chunk=k)
        transport = SimTransport(driver)
        try:
            trace = await transport.stream(
                ChatRequest(model="m", messages=user("interval"), params={"max_tokens": n})
            )
        finally:
            await transport.aclose()
        rec = driver.record(trace.response_id or "")
        assert rec is not None and rec.ttft_s is not None
        assert len(rec.token_times_s) == n
        # Token 1 alone, then a chunk every k tokens, the rest at the finish.
        ends = sorted({1, *range(1 + k, n, k), n})
        assert len(ends) == 1 + math.ceil((n - 1) / k)
        assert len(trace.chunk_ns) == len(ends)
        assert sum(trace.chunk_tokens) == n
        client_ttft = (trace.chunk_ns[0] - trace.sent_ns) / 1e9
        assert client_ttft == pytest.approx(rec.ttft_s, abs=1e-6)
        # Every chunk arrives (virtual time) when its last token was decoded, no later.
        for chunk_ns, end in zip(trace.chunk_ns, ends, strict=True):
            due = rec.token_times_s[end - 1] - rec.arrival_s
            assert (chunk_ns - trace.sent_ns) / 1e9 == pytest.approx(due, abs=1e-6)

    run_virtual(main())


def test_a_tool_call_opens_with_the_first_token() -> None:
    engine = Engine(QUICK, seed=3)
    rid = engine.add_chat(user("read it"), tools=TOOLS)
    rec = engine.record(rid)
    assert rec.plan is not None
    enc = ChunkEncoder(
        request_id=f"chatcmpl-{rid}", model="m", created=0, plan=rec.plan, tokens_per_chunk=4
    )
    steps: list[list[bytes]] = []
    while engine.has_work:
        if rid in engine.step().emitted:
            steps.append(enc.advance(rec))
    assert rec.finish_reason == "tool_calls"
    # The first step sends the role and the call's opening delta (the first token's).
    role, first = (json.loads(p) for p in steps[0])
    assert role["choices"][0]["delta"]["role"] == "assistant"
    opening = enc.content_payload(0, 1)
    assert opening is not None
    assert first == json.loads(opening)
    assert first["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] == ""
    # The rest go out after every 4th token past the first (when those say something)
    # and at the finish.
    n = rec.completion_tokens
    sent = [i for i, ps in enumerate(steps) if ps]
    assert sent[0] == 0 and sent[-1] == n - 1
    assert set(sent) <= {0, *range(4, n, 4), n - 1}
    assert steps[-1][-1] == DONE
