"""``tool_errors="raise"``: the session ends with the failing call's error; a sync
sibling's thread runs on until its function returns, its result dropped."""

from __future__ import annotations

import threading

from agentflow import Agent, HTTPTransport, tool
from agentflow.testing import Reply, ScriptedServer, capture_events
from tests.wait import GUARD_S, eventually


@tool
async def boom() -> str:
    """Fails."""
    raise RuntimeError("boom")


async def test_a_sync_sibling_runs_on_after_the_session_ends_its_result_dropped() -> None:
    """The guide said no sibling runs after the session's end: a sync tool's thread does
    (docs/guide.md says so now); no event tells of its result."""
    release, returned = threading.Event(), threading.Event()

    @tool
    def write_file(path: str) -> str:
        """A slow sync tool with a side effect."""
        release.wait(GUARD_S)
        returned.set()
        return "written"

    agent = Agent(name="a", model="m", tools=[write_file, boom], tool_errors="raise")
    events = capture_events()
    script = [Reply.stream(tool_calls=[("write_file", {"path": "x"}), ("boom", {})])]
    try:
        async with ScriptedServer(script) as srv, HTTPTransport(srv.base_url) as http:
            result = await agent.session("go").run(http, callbacks=[events])
        assert result.status == "error"
        assert not returned.is_set()  # the session ended while its thread still ran
        seen = len(events.events)
    finally:
        release.set()
    await eventually(returned.is_set, "the sync tool's function to return")
    assert len(events.events) == seen
    assert not [e for e in events.of_type("tool_result") if e.name == "write_file"]
