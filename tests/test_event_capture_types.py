"""``EventCapture.of_type``: one type's events come back typed as its class, so the
guide's ``events.of_type("tool_call")[0].call.name`` passes ``mypy --strict`` (this file
is checked by the project's mypy run: its reads have no cast or isinstance); and a type
no event has is a ConfigError, as in ``capture_events``, not an empty list."""

from __future__ import annotations

import pytest

from agentflow import Agent, ConfigError, Event, Fleet
from agentflow.testing import MockTransport, Reply, capture_events
from agentflow.transport import ChatRequest


def get_price(sku: str) -> float:
    """Look up a product's price.

    Args:
        sku: the product's stock-keeping unit.
    """
    return 9.5


def model(request: ChatRequest) -> Reply:
    if request.messages[-1]["role"] == "tool":
        return Reply.text(f"It costs {request.messages[-1]['content']}.")
    return Reply.tool_call("get_price", {"sku": "A-1"})


async def test_one_type_reads_as_its_class_and_a_misspelling_fails() -> None:
    agent = Agent(name="shop", model="m", tools=[get_price])
    events = capture_events()
    await Fleet(MockTransport(model), callbacks=[events]).run([agent.session("Price of A-1?")])
    assert events.of_type("tool_call")[0].call.name == "get_price"  # the guide's line
    assert events.of_type("tool_result")[0].output == "9.5"
    assert [e.turn for e in events.of_type("turn_end")] == [0, 1]
    both: list[Event] = events.of_type("tool_call", "tool_result")
    assert [e.type for e in both] == ["tool_call", "tool_result"]
    with pytest.raises(ConfigError, match=r"EventCapture.of_type\(\*types\).*'tool_calls'"):
        events.of_type("tool_calls")
    with pytest.raises(ConfigError, match="'turnend'"):
        events.of_type("turn_end", "turnend")
