"""Tools compare by what they are, and can go in a set (``Agent(tools=...)`` takes one)."""

from __future__ import annotations

from agentflow import Agent, Tool, tool


def _a(x: int) -> int:
    """A."""
    return x


def _b(x: int) -> int:
    """B."""
    return x


def test_tools_are_hashable_and_equal_when_made_alike() -> None:
    """A tool was unhashable (its hash covered the ``parameters`` dict) and never equal to
    another made from the same function (each holds a generated model class of its own)."""
    a, b = tool(_a), tool(_b)
    assert a == tool(_a) and hash(a) == hash(tool(_a))
    assert (
        a != b
        and a != Tool.from_function(_a, timeout_s=5)
        and a != Tool.from_function(_a, name="other")
    )
    assert len({a, b, tool(_a)}) == 2
    assert {a: 1}[tool(_a)] == 1
    hand = Tool(name="h", description="", parameters={"type": "object"}, fn=_a)
    assert hand == Tool(name="h", description="", parameters={"type": "object"}, fn=_a)
    assert len({hand, Tool(name="h", description="", parameters={"type": "object"}, fn=_a)}) == 1


def test_agents_take_a_set_of_tools_and_compare_by_them() -> None:
    """``Agent(tools=...)`` says tools may come from a set; agents of the same functions
    are equal, and agents of other tools are not."""
    agent = Agent(name="x", model="m", tools={tool(_b), tool(_a)})
    assert [t.name for t in agent.tools] == ["_a", "_b"]
    assert agent == Agent(name="x", model="m", tools=[_a, _b])
    assert agent != Agent(name="x", model="m", tools=[_a])
    assert agent.tool_specs_json == Agent(name="x", model="m", tools=[_b, _a]).tool_specs_json


def test_equal_tools_hash_alike_and_a_validated_tool_is_not_a_raw_one() -> None:
    """The hash was taken over the spec's JSON, where 1 and 1.0 differ though they compare
    equal: two equal tools hashed apart and a set kept both. And a hand-built tool equal
    in every field to a described one compared equal, though it passes the model's
    arguments through unchecked where the described one validates them."""
    one = Tool(name="t", description="", parameters={"default": 1}, fn=_a)
    one_f = Tool(name="t", description="", parameters={"default": 1.0}, fn=_a)
    assert one == one_f and hash(one) == hash(one_f) and len({one, one_f}) == 1
    described = tool(_a)
    raw = Tool(name="_a", description=described.description, parameters=described.parameters, fn=_a)
    assert described != raw


def test_agents_are_hashable_consistently_with_equality() -> None:
    """An agent's ``params`` is a dict: the generated ``__hash__`` raised ``TypeError``,
    while ``dict[Agent, int]`` type-checked. Equal agents hash alike."""
    coder = Agent(name="coder", model="m", tools=[_a], params={"temperature": 0})
    reviewer = Agent(name="reviewer", model="m")
    turns: dict[Agent, int] = {coder: 0, reviewer: 1}
    again = Agent(name="coder", model="m", tools=[tool(_a)], params={"temperature": 0})
    assert again == coder and hash(again) == hash(coder) and turns[again] == 0
    assert len({coder, again, reviewer}) == 2
    other = Agent(name="coder", model="m", params={"temperature": 1})
    assert other != coder and other not in turns
