"""A session's turn loop: model turn → tools → results → next turn, and every way it can end."""

from __future__ import annotations

import asyncio
import pickle
import re

import pytest

from agentflow import (
    Agent,
    ConfigError,
    ErrorEvent,
    Event,
    Fleet,
    FleetResult,
    HTTPTransport,
    MaxTurnsExceeded,
    ServerError,
    SessionResult,
    TokenEvent,
    Tool,
    ToolError,
)
from agentflow.testing import Reply, ScriptedServer


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


AGENT = Agent(
    name="calc", model="m", instructions="You add.", tools=[add, explode], params={"temperature": 0}
)


async def test_tool_loop_to_final_answer() -> None:
    """The tool's result goes back paired with its call id, and the next turn sees it all."""
    events: list[Event] = []
    async with (
        ScriptedServer(
            [Reply.tool_call("add", {"a": 2, "b": 3}, call_id="c7"), Reply.text("It is 5")]
        ) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await AGENT.session("2+3?").run(t, callbacks=[events.append])
    srv.assert_complete()
    assert result.ok and result.final_output == "It is 5" and len(result.turns) == 2
    second = srv.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["id"] == "c7" and second[3]["tool_call_id"] == "c7"
    assert second[3]["content"] == "5"
    assert srv.requests[0].body["tools"][0]["function"]["name"] == "add"
    assert srv.requests[0].body["temperature"] == 0
    tokens = "".join(e.text for e in events if isinstance(e, TokenEvent) and e.turn == 1)
    assert tokens == "It is 5"
    assert [e.type for e in events if e.type != "token"] == [
        "turn_end",
        "tool_call",
        "tool_result",
        "turn_end",
        "session_end",
    ]


async def test_max_turns_keeps_every_turn() -> None:
    """A model that never stops calling tools ends at max_turns with all turns recorded."""
    agent = Agent(name="loop", model="m", tools=[add], max_turns=2)
    async with (
        ScriptedServer([Reply.tool_call("add", {"a": 1, "b": 1})] * 2) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await agent.run("go", t)
    assert result.status == "max_turns" and isinstance(result.error, MaxTurnsExceeded)
    assert len(result.turns) == 2 and result.messages[-1]["role"] == "tool"


async def test_tool_error_goes_back_to_the_model() -> None:
    """By default a failing tool's error is the tool result; the model can recover."""
    async with (
        ScriptedServer(
            [
                Reply.tool_call("explode", {"reason": "no disk"}),
                Reply.tool_call("nope", {}),
                Reply.text("sorry"),
            ]
        ) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await AGENT.run("go", t)
    assert result.ok
    tool_msgs = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "RuntimeError: no disk" in tool_msgs[0]
    assert "unknown tool 'nope'" in tool_msgs[1]


async def test_tool_error_can_end_the_session() -> None:
    """With tool_errors='raise' the session fails with the ToolError, turns kept."""
    agent = Agent(name="strict", model="m", tools=[explode], tool_errors="raise")
    async with (
        ScriptedServer([Reply.tool_call("explode", {"reason": "x"})]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await agent.run("go", t)
    assert result.status == "error" and isinstance(result.error, ToolError)
    assert len(result.turns) == 1


async def test_server_failure_loses_nothing() -> None:
    """A server error on turn 2 fails the session (retries off) but keeps turn 1 and the
    conversation."""
    async with (
        ScriptedServer([Reply.tool_call("add", {"a": 1, "b": 2}), Reply.error(500)]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await AGENT.session("go").run(t, retry=None)
    assert result.status == "error" and isinstance(result.error, ServerError)
    assert len(result.turns) == 1
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "tool"]


def test_agent_validation_names_the_field() -> None:
    """Bad agent config raises ConfigError naming the field and value."""
    with pytest.raises(ConfigError, match="max_turns"):
        Agent(name="a", model="m", max_turns=0)
    with pytest.raises(ConfigError, match="stream"):
        Agent(name="a", model="m", params={"stream": False})
    with pytest.raises(ConfigError, match="duplicate tool"):
        Agent(name="a", model="m", tools=[add, add])
    with pytest.raises(ConfigError, match="tool_errors"):
        Agent(name="a", model="m", tool_errors="ignore")  # type: ignore[arg-type]
    # The budget reserves it and the scheduler charges it: a whole number ≥ 1.
    for key in ("max_tokens", "max_completion_tokens"):
        for bad in (-5, 0, 4096.0, True, "128"):
            with pytest.raises(ConfigError, match=rf"params\['{key}'\] must be an int ≥ 1"):
                Agent(name="a", model="m", params={key: bad})
    assert Agent(name="a", model="m", params={"max_tokens": 1}).max_output_tokens == 1


def test_error_event_is_typed() -> None:
    """ErrorEvent says where the failure happened."""
    e = ErrorEvent(agent="a", session_id="s", turn=0, where="tool", error=ValueError())
    assert e.type == "error" and e.where == "tool"


async def test_a_raised_tool_error_cancels_the_sibling_calls() -> None:
    """tool_errors='raise' and two calls in one turn: one fails at once, the other waits.
    The session ends with the ToolError only after the other call was cancelled: no tool
    runs, and no event comes, past the session's end."""
    import asyncio

    cancelled: list[str] = []
    events: list[str] = []

    async def wait_long(what: str) -> str:
        """Wait a long time."""
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(what)
            raise
        return "done"

    agent = Agent(
        name="strict",
        model="m",
        tools=[Tool.from_function(wait_long, in_thread=False), explode],
        tool_errors="raise",
    )
    reply = Reply.stream(tool_calls=[("wait_long", {"what": "page"}), ("explode", {"reason": "x"})])
    async with ScriptedServer([reply]) as srv, HTTPTransport(srv.base_url) as t:
        result = await agent.session("go").run(t, callbacks=[lambda e: events.append(e.type)])
        assert cancelled == ["page"]  # already, not when the loop shuts down
    assert result.status == "error" and isinstance(result.error, ToolError)
    assert events[-1] == "session_end"
    assert "tool_result" not in events


async def test_a_tool_that_exits_fails_only_its_call() -> None:
    """A tool raising ``SystemExit`` (argparse on bad arguments) in a fleet: the model
    gets the error and goes on, and the other sessions complete; it used to cancel the
    whole run and exit the process."""
    import argparse

    from agentflow import Fleet

    def grep(command_line: str) -> str:
        """Run a grep-like CLI."""
        parser = argparse.ArgumentParser(prog="grep")
        parser.add_argument("--count", type=int)
        parser.parse_args(command_line.split())  # "--count x": parser.error -> SystemExit(2)
        return "searched"

    agent = Agent(name="a", model="m", tools=[grep], max_turns=3)
    replies = [
        Reply.tool_call("grep", {"command_line": "--count x"}, call_id="c0"),
        Reply.text("two"),
        Reply.text("recovered"),
    ]
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        result = await Fleet(t, max_concurrency=1).run([agent.session(f"s{i}") for i in range(2)])
    assert [s.status for s in result.sessions] == ["completed", "completed"]
    (tool_msg,) = [m for m in result.sessions[0].messages if m["role"] == "tool"]
    assert tool_msg["content"].startswith("Error: tool 'grep' raised SystemExit: 2")


async def test_a_session_error_names_the_turn_that_failed() -> None:
    """``ErrorEvent(where="session").turn`` is the turn being worked on: the turn whose
    tool ended the session (it used to name the next turn, which never ran), or the
    model turn that failed."""
    events: list[Event] = []
    strict = Agent(name="strict", model="m", tools=[add, explode], tool_errors="raise")
    replies = [
        Reply.tool_call("add", {"a": 1, "b": 1}),
        Reply.tool_call("explode", {"reason": "x"}),  # turn 1's tool ends the session
        Reply.tool_call("add", {"a": 1, "b": 1}),
        Reply.error(500),  # turn 1's request fails
    ]
    async with ScriptedServer(replies) as srv, HTTPTransport(srv.base_url) as t:
        by_tool = await strict.session("go").run(t, callbacks=[events.append])
        by_model = await strict.session("go").run(t, callbacks=[events.append], retry=None)
    assert isinstance(by_tool.error, ToolError) and len(by_tool.turns) == 2
    assert isinstance(by_model.error, ServerError) and len(by_model.turns) == 1
    failed = [e for e in events if isinstance(e, ErrorEvent) and e.where == "session"]
    assert [(e.session_id, e.turn) for e in failed] == [
        (by_tool.session_id, 1),
        (by_model.session_id, 1),
    ]


async def test_a_session_runs_once() -> None:
    """Running a session again (a chat loop appending a user message) is a ConfigError:
    it used to start over at turn 0 with a fresh ``max_turns`` budget, two turns 0 in one
    session. A new session from its messages goes on with the conversation; the result's
    messages are the conversation as it ended (they were the session's live list)."""
    agent = Agent(name="chat", model="m", instructions="Be brief.", max_turns=2)
    async with (
        ScriptedServer([Reply.text("first"), Reply.text("second")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        session = agent.session("hi")
        first = await session.run(t)
        session.messages.append({"role": "user", "content": "more"})
        with pytest.raises(ConfigError, match=r"session 'chat-\d+' has already run \(status "):
            await session.run(t)
        assert session.result is first and len(srv.requests) == 1  # nothing was sent
        assert first.messages[-1] == {"role": "assistant", "content": "first"}  # as it ended
        history = [*first.messages[1:], {"role": "user", "content": "more"}]
        second = await agent.session(history).run(t)
    assert second.ok and second.final_output == "second"
    assert [m["role"] for m in srv.requests[1].body["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]


async def test_a_session_runs_in_one_run_at_a_time() -> None:
    """Two runs of one session at once (two ``Session.run``, two fleets, or one of each)
    used to both run it, interleaving their turns in one conversation (turns 0, 0, 1, 1;
    each run's tool results after the other's calls). The second is a ConfigError now,
    before it sends anything; a fleet that fails before running leaves its sessions free."""
    agent = Agent(name="twice", model="m", tools=[add], max_turns=3)
    script = [Reply.tool_call("add", {"a": 1, "b": 2}), Reply.text("3")]
    async with ScriptedServer(script * 3) as srv, HTTPTransport(srv.base_url) as t:
        session = agent.session("1+2?")
        first, second = await asyncio.gather(session.run(t), session.run(t), return_exceptions=True)
        assert isinstance(first, SessionResult) and first.ok
        assert isinstance(second, ConfigError)
        assert re.match(r"session 'twice-\d+' is already running \(in another", str(second))
        assert [r.index for r in session.turns] == [0, 1]

        held = agent.session("1+2?")
        results = await asyncio.gather(
            Fleet(t).run([held]), Fleet(t).run([held]), held.run(t), return_exceptions=True
        )
        assert isinstance(results[0], FleetResult) and results[0].sessions[0].ok
        assert [type(r) for r in results[1:]] == [ConfigError, ConfigError]
        assert all("is already running" in str(r) for r in results[1:])
        assert [r.index for r in held.turns] == [0, 1]
        assert not pickle.loads(pickle.dumps(held))._running  # a worker's copy is not held

        free = agent.session("1+2?")
        with pytest.raises(ConfigError, match="run_id and run_config need a store"):
            await Fleet(t).run([free], run_id="r1")
        assert (await free.run(t)).ok
    assert len(srv.requests) == 6
