"""Test an agent's tool loop without a model: in-process with MockTransport, then over
real HTTP on loopback with ScriptedServer. Both decode the replies the way a server's
bytes are decoded, so the metrics and events are the ones a real run would give.

python examples/test_your_agent.py
"""

from __future__ import annotations

import asyncio

from agentflow import Agent, Fleet, HTTPTransport, ToolCallEvent
from agentflow.testing import MockTransport, Reply, ScriptedServer, capture_events
from agentflow.transport import ChatRequest


def get_price(sku: str) -> float:
    """Look up a product's price.

    Args:
        sku: the product's stock-keeping unit.
    """
    return {"A-1": 9.5}.get(sku, 0.0)


agent = Agent(name="shop", model="any", tools=[get_price])


def model(request: ChatRequest) -> Reply:
    """A fake model: asks for the price, then answers with the tool's result."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return Reply.text(f"It costs {last['content']}.", prompt_tokens=30)
    return Reply.tool_call("get_price", {"sku": "A-1"})


async def in_process() -> None:
    """No sockets: a fleet of three sessions on MockTransport, events captured."""
    events = capture_events()
    transport = MockTransport(model)
    result = await Fleet(transport, callbacks=[events]).run(
        agent.session("How much is A-1?") for _ in range(3)
    )
    assert all(s.final_output == "It costs 9.5." for s in result.sessions)
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [c.call.name for c in calls] == ["get_price"] * 3
    last = result.sessions[0].turns[-1].metrics
    print(
        f"in-process: {len(result.sessions)} sessions, {len(transport.requests)} requests, "
        f"{len(calls)} tool calls, {len(events)} events; last turn: "
        f"{last.prompt_tokens} prompt / {last.output_tokens} output tokens"
    )
    print("streamed:", events.text(result.sessions[0].session_id))


async def over_http() -> None:
    """The same agent against a scripted server: real HTTP on loopback."""
    script = [Reply.tool_call("get_price", {"sku": "A-1"}), Reply.text("It costs 9.5.")]
    async with ScriptedServer(script) as server, HTTPTransport(server.base_url) as transport:
        result = await agent.run("How much is A-1?", transport)
    server.assert_complete()
    assert result.ok
    assert result.final_output == "It costs 9.5."
    tool_message = result.messages[-2]
    assert tool_message == {"role": "tool", "tool_call_id": "call_1", "content": "9.5"}
    print("tool loop OK:", [m["role"] for m in result.messages])


async def main() -> None:
    await in_process()
    await over_http()


if __name__ == "__main__":
    asyncio.run(main())
