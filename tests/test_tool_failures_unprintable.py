"""A tool failure whose exception cannot be made a string is still the tool's failure."""

from __future__ import annotations

import pytest

from agentflow import Agent, HTTPTransport, ToolError, tool
from agentflow.testing import Reply, ScriptedServer


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class _Opaque:
    """A result no text can be made of: its ``str()`` raises an unprintable exception."""

    def __str__(self) -> str:
        raise _Unprintable


@tool
def _raises(x: int) -> str:
    """Fail with an exception whose ``str()`` raises."""
    raise _Unprintable


@tool(in_thread=False)
def _returns_opaque(x: int) -> object:
    """Return a value whose ``str()`` raises an unprintable exception."""
    return _Opaque()


async def test_an_unprintable_exception_is_a_tool_error() -> None:
    """Formatting the message called ``str()`` on the exception inside the ``except``: a
    raising ``__str__`` escaped as a bare ``RuntimeError``, not a :class:`ToolError`."""
    with pytest.raises(
        ToolError, match=r"'_raises' raised _Unprintable: <unprintable _Unprintable>"
    ):
        await _raises.invoke('{"x": 1}')
    with pytest.raises(ToolError, match=r"cannot be made text: _Unprintable: <unprintable"):
        await _returns_opaque.invoke('{"x": 1}')


async def test_the_model_hears_of_an_unprintable_failure() -> None:
    """With ``tool_errors="return"`` the session goes on and the model gets ``Error: ...``;
    it used to end the session with the ``RuntimeError`` of the failed ``__str__``."""
    agent = Agent(name="a", model="m", tools=[_raises], tool_errors="return")
    async with (
        ScriptedServer([Reply.tool_call("_raises", {"x": 1}), Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await agent.run("go", t)
    assert result.ok and result.final_output == "ok"
    (sent,) = [m for m in srv.requests[1].body["messages"] if m["role"] == "tool"]
    assert sent["content"].startswith("Error: tool '_raises' raised _Unprintable: <unprintable")
