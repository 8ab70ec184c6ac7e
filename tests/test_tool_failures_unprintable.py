"""A tool failure whose exception cannot be made a string is still the tool's failure."""

from __future__ import annotations

import pytest

from agentflow import Agent, ToolError, tool
from tests.toolcall import one_call


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
    result, sent = await one_call(agent, "_raises", {"x": 1})
    assert result.ok and result.final_output == "ok"
    assert sent.startswith("Error: tool '_raises' raised _Unprintable: <unprintable")
