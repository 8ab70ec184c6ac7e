"""A session's ``task`` and ``session_id`` are checked when it is made: what is not a
list of messages, a history whose tool calls the session cannot read, an id that is not
text a request can carry — each a ``ConfigError`` naming the field at
``Agent.session``. They used to be bare ``ValueError``/``TypeError`` there, or a bare
``AttributeError``/``TypeError``/``UnicodeEncodeError`` ending the session at its turns."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from agentflow import Agent, ConfigError, HTTPTransport
from agentflow.testing import Reply, ScriptedServer

AGENT = Agent(name="a", model="m", instructions="Be brief.")
USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("task", "says"),
    [
        (["hello"], r"task\[0\] must be a message \(a mapping .*got str 'hello'"),
        ([("role", "user")], r"task\[0\] must be a message .*got tuple"),
        ([USER, None], r"task\[1\] must be a message .*got NoneType None"),
        (5, r"task must be a str or a list of messages \(mappings\), got int"),
        (b"hello", r"task must be a str or a list .*got bytes"),
        (USER, r"task must be a str or a list .*got dict"),
    ],
)
def test_a_task_that_is_not_messages_is_refused_naming_the_item(task: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^session 's': " + says):
        AGENT.session(task, session_id="s")


@pytest.mark.parametrize(
    ("calls", "says"),
    [
        ("oops", r"task\[1\]\['tool_calls'\] must be a list of tool calls, got str"),
        (["oops"], r"task\[1\]\['tool_calls'\]\[0\] must be a tool call .*got str"),
        (
            [{"id": "c1", "type": "function", "function": None}],
            r"task\[1\]\['tool_calls'\]\[0\]\['function'\] must be a mapping .*got NoneType",
        ),
    ],
)
def test_a_history_whose_tool_calls_cannot_be_read_is_refused(calls: Any, says: str) -> None:
    """These ended the session at its first turn with ``'str' object has no attribute
    'get'`` (the prompt estimate reads each call's function), alone and in a fleet."""
    task = [USER, {"role": "assistant", "content": None, "tool_calls": calls}]
    with pytest.raises(ConfigError, match=r"^session 's': " + says):
        AGENT.session(task, session_id="s")


@pytest.mark.parametrize(
    ("session_id", "says"),
    [
        (42, r"session_id must be a str, got int 42"),
        (("t", 1), r"session_id must be a str, got tuple"),
        ("caf\udce9", r"session_id 'caf\\udce9' holds a lone surrogate, U\+DCE9 at index 3"),
        ("a\r\nX-Other: 1", r"session_id .* holds a control character \(U\+000D\)"),
    ],
)
def test_a_session_id_a_request_cannot_carry_is_refused(session_id: Any, says: str) -> None:
    """An int failed every turn with a bare ``TypeError``; a lone surrogate with a
    ``UnicodeEncodeError``; a line break with an error about the header at each turn."""
    with pytest.raises(ConfigError, match=says):
        AGENT.session("hi", session_id=session_id)


async def test_what_passes_runs() -> None:
    """A history with tool calls (a tuple of messages) and a session id outside ASCII
    run as before; no id (or an empty one) is made up."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history: tuple[dict[str, Any], ...] = (
        USER,
        {"role": "assistant", "content": None, "tool_calls": (call,)},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    )
    session = AGENT.session(history, session_id="josé-用户-1")
    assert AGENT.session("hi", session_id="").session_id.startswith("a-")
    async with ScriptedServer([Reply.text("ok")]) as srv, HTTPTransport(srv.base_url) as t:
        result = await session.run(t)
    # (percent-encoded in the header: docs/scheduling.md, "Session keys on the wire")
    assert result.ok and srv.requests[0].headers["x-session-id"] == quote("josé-用户-1")
    assert [m["role"] for m in srv.requests[0].body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]


@pytest.mark.parametrize("name", ["line\nbreak", "nul\x00", "bad\udce9"])
def test_an_agent_name_no_header_can_carry_is_refused(name: str) -> None:
    """The agent's name starts every session id it makes (``<name>-<n>``), which goes
    into the ``X-Session-ID`` header: a name with a control character or a lone
    surrogate failed every turn of such a session (differently per transport)."""
    with pytest.raises(ConfigError, match=r"Agent\.name"):
        Agent(name=name, model="m")


def test_a_tab_is_a_header_character() -> None:
    """A tab may be in a header value (RFC 9110): a session id or agent name holding one
    is taken."""
    agent = Agent(name="a\tb", model="m")
    assert agent.session("x").session_id.startswith("a\tb-")
    assert agent.session("x", session_id="s\t1").session_id == "s\t1"
