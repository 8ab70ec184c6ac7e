"""``tool_errors="raise"``: the session ends with the failing call's error; a sync
sibling's thread runs on until its function returns, its result dropped."""

from __future__ import annotations

import threading

from agentflow import Agent, HTTPTransport, tool
from agentflow.testing import Reply, ScriptedServer, capture_events
from tests.wait import GUARD_S, eventually


async def test_a_sync_sibling_runs_on_after_the_session_ends_its_result_dropped() -> None:
    """The guide said no sibling runs after the session's end: a sync tool's thread does
    (docs/guide.md says so now); no event tells of its result."""
    started, release, returned = threading.Event(), threading.Event(), threading.Event()

    @tool
    def write_file(path: str) -> str:
        """A slow sync tool with a side effect."""
        started.set()
        release.wait(GUARD_S)
        returned.set()
        return "written"

    @tool
    async def boom() -> str:
        """Fails, once its sibling's thread runs: a sibling not started when the session
        ends never runs (the executor drops it), and the test would wait for nothing."""
        await eventually(started.is_set, "write_file's thread to start")
        raise RuntimeError("boom")

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
