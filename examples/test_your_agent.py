"""Test an agent's tool loop against a scripted server — real HTTP on loopback, no model.

python examples/test_your_agent.py
"""

from __future__ import annotations

import asyncio

from agentflow import Agent, HTTPTransport
from agentflow.testing import Reply, ScriptedServer


def get_price(sku: str) -> float:
    """Look up a product's price.

    Args:
        sku: the product's stock-keeping unit.
    """
    return {"A-1": 9.5}.get(sku, 0.0)


async def main() -> None:
    agent = Agent(name="shop", model="any", tools=[get_price])
    script = [Reply.tool_call("get_price", {"sku": "A-1"}), Reply.text("It costs 9.5.")]
    async with ScriptedServer(script) as server, HTTPTransport(server.base_url) as transport:
        result = await agent.run("How much is A-1?", transport)
    server.assert_complete()
    assert result.ok
    assert result.final_output == "It costs 9.5."
    tool_message = result.messages[-2]
    assert tool_message == {"role": "tool", "tool_call_id": "call_1", "content": "9.5"}
    print("tool loop OK:", [m["role"] for m in result.messages])


if __name__ == "__main__":
    asyncio.run(main())
