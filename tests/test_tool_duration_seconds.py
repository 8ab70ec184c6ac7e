"""A tool's duration is its nanoseconds divided by 1e9 — the float nearest the true
number of seconds — not multiplied by 1e-9, which is off by an ulp for ~40% of whole
milliseconds (60 ms read 0.060000000000000005)."""

from __future__ import annotations

import itertools

from agentflow import Agent, Event, HTTPTransport, ToolResultEvent
from agentflow.testing import Reply, ScriptedServer


def wait() -> str:
    """Return at once (the test's clock moves 60 ms per read)."""
    return "done"


async def test_a_tools_duration_is_its_nanoseconds_over_1e9() -> None:
    ticks = itertools.count(step=60_000_000)  # 60 ms per read: never an exact float

    def clock() -> int:
        return next(ticks)

    events: list[ToolResultEvent] = []

    def keep(event: Event) -> None:
        if isinstance(event, ToolResultEvent):
            events.append(event)

    agent = Agent(name="a", model="m", tools=[wait])
    async with (
        ScriptedServer([Reply.tool_call("wait", {}), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await agent.session("go").run(http, clock=clock, callbacks=[keep])
    assert result.ok, result.error
    (event,) = events
    ns = round(event.duration_s * 1e9)
    assert ns > 0 and ns % 60_000_000 == 0
    assert event.duration_s == ns / 1e9  # the correctly rounded seconds
