"""ScriptedServer takes a long conversation's request: a body over aiohttp's default 1 MiB
limit (about 260k tokens of context) is answered from the script and recorded, not
refused with a 413 nobody scripted."""

from __future__ import annotations

from agentflow import Agent, HTTPTransport
from agentflow.testing import Reply, ScriptedServer


async def test_a_request_over_one_mib_is_answered_from_the_script() -> None:
    prompt = "x " * 1_000_000  # 2 MB of message: twice aiohttp's default limit
    async with ScriptedServer([Reply.text("ok")]) as srv, HTTPTransport(srv.base_url) as t:
        result = await Agent(name="a", model="m").run(prompt, t)
    assert result.error is None and result.final_output == "ok"
    assert len(srv.requests) == 1
    assert srv.requests[0].body["messages"][-1]["content"] == prompt
    srv.assert_complete()
