"""Tool output has an optional size cap: too long a result is cut, with a marker the
model can read, and the cut is reported on the ToolResultEvent.

Every case runs a real session against a :class:`ScriptedServer` and checks what the
model actually received in its next request.
"""

from __future__ import annotations

import pytest

from agentflow import (
    Agent,
    ConfigError,
    Event,
    SessionResult,
    Tool,
    ToolResultEvent,
    tool,
)
from tests.toolcall import one_call


def dump(n: int) -> str:
    """Return ``n`` characters."""
    return "x" * n


@tool(max_output_chars=10)
def tiny(n: int) -> str:
    """Return ``n`` characters; this tool keeps at most 10."""
    return "y" * n


def shout(n: int) -> str:
    """Fail with a long message."""
    raise RuntimeError("z" * n)


async def run(
    agent: Agent, call: str, args: dict[str, int]
) -> tuple[SessionResult, str, list[ToolResultEvent]]:
    """One tool call then an answer; the tool message the model got, and the events."""
    events: list[Event] = []
    result, sent = await one_call(agent, call, args, callbacks=[events.append])
    return result, sent, [e for e in events if isinstance(e, ToolResultEvent)]


CAPPED = Agent(name="a", model="m", tools=[dump, tiny, shout], max_tool_output_chars=100)


async def test_a_long_result_is_cut_with_a_marker() -> None:
    """The model receives the first 100 characters and a line saying how many of how
    many it sees; the event carries the same text and the number cut."""
    result, sent, (event,) = await run(CAPPED, "dump", {"n": 25_000})
    assert result.ok
    assert (
        sent == "x" * 100 + "\n[agentflow: tool output truncated: 100 of 25,000 characters shown]"
    )
    assert result.messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": sent}
    assert event.output == sent and event.truncated_chars == 24_900 and not event.is_error


async def test_a_result_within_the_cap_is_sent_whole() -> None:
    """A result of exactly the cap is not touched, and the event says nothing was cut."""
    _, sent, (event,) = await run(CAPPED, "dump", {"n": 100})
    assert sent == "x" * 100 and event.truncated_chars == 0


async def test_the_tools_own_cap_beats_the_agents() -> None:
    """``@tool(max_output_chars=10)`` keeps 10 characters although the agent allows 100."""
    _, sent, (event,) = await run(CAPPED, "tiny", {"n": 50})
    assert sent == "y" * 10 + "\n[agentflow: tool output truncated: 10 of 50 characters shown]"
    assert event.truncated_chars == 40


async def test_an_error_message_is_capped_too() -> None:
    """What goes back to the model is capped whatever it is — a huge error message too."""
    _, sent, (event,) = await run(CAPPED, "shout", {"n": 10_000})
    assert event.is_error and sent.startswith("Error: tool 'shout' raised RuntimeError: zzz")
    assert len(sent.split("\n")[0]) == 100 and sent.endswith("characters shown]")
    assert event.truncated_chars == len("Error: tool 'shout' raised RuntimeError: ") + 10_000 - 100


async def test_without_a_cap_results_are_sent_whole() -> None:
    """The default is no cap."""
    agent = Agent(name="a", model="m", tools=[dump])
    assert agent.max_tool_output_chars is None
    _, sent, (event,) = await run(agent, "dump", {"n": 25_000})
    assert sent == "x" * 25_000 and event.truncated_chars == 0


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_bad_caps_are_config_errors_naming_the_field(bad: object) -> None:
    """A cap that is not an int ≥ 1 is refused, by name."""
    with pytest.raises(ConfigError, match=r"'a': max_tool_output_chars"):
        Agent(name="a", model="m", max_tool_output_chars=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"tool 'dump': max_output_chars"):
        Tool.from_function(dump, max_output_chars=bad)  # type: ignore[arg-type]
