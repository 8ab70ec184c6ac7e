"""A ``GeneratorExit`` the tool's own code raises is its failure; one thrown into a call
being closed (``coro.close()``) goes on up, as it must."""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, Tool, ToolError, tool
from tests.toolcall import one_call
from tests.wait import GUARD_S


@tool
async def closer() -> str:
    """Raises what a helper raised."""
    raise GeneratorExit("the tool's own")


@tool(in_thread=False)
def closer_on_loop() -> str:
    """A sync tool on the event loop."""
    raise GeneratorExit("on the loop")


def _waiting(finished: list[str], started: asyncio.Event | None = None) -> Tool:
    """A tool that waits for ever, noting in ``finished`` when its coroutine is closed."""

    @tool
    async def waits() -> str:
        """Waits."""
        if started is not None:
            started.set()
        try:
            await asyncio.Event().wait()
        finally:
            finished.append("closed")
        return "never"

    return waits


@pytest.mark.parametrize("raising", [closer, closer_on_loop], ids=lambda t: t.name)
async def test_a_generator_exit_the_tool_raises_is_its_failure(raising: object) -> None:
    """It went on up as itself and ended the session with RuntimeError('coroutine ignored
    GeneratorExit'), even with tool_errors="return"."""
    name = raising.name  # type: ignore[attr-defined]
    with pytest.raises(ToolError, match=f"'{name}' raised GeneratorExit") as info:
        await raising.invoke("{}")  # type: ignore[attr-defined]
    assert isinstance(info.value.__cause__, GeneratorExit)

    agent = Agent(name="a", model="m", tools=[raising], tool_errors="return")  # type: ignore[list-item]
    result, sent = await one_call(agent, name, {})
    assert result.ok
    assert sent.startswith(f"Error: tool '{name}' raised GeneratorExit")


async def test_closing_a_call_still_closes_it() -> None:
    """``close()`` on a call's coroutine, suspended in its tool, closes it: the
    ``GeneratorExit`` is not taken for the tool's failure."""
    started = asyncio.Event()
    finished: list[str] = []
    call = _waiting(finished, started).invoke("{}")
    task = asyncio.ensure_future(call)
    await asyncio.wait_for(started.wait(), GUARD_S)
    call.close()  # raises if the GeneratorExit was turned into a ToolError
    assert finished == ["closed"]
    task.cancel()  # its coroutine is closed: the task ends at its next step
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), GUARD_S)


def test_closing_a_call_after_its_loop_closed_still_closes_it() -> None:
    """A call left pending when its loop closed, then closed (``close()``, or garbage
    collection) with no loop running: asking for the current task raised RuntimeError
    ("no running event loop") out of ``close()`` instead of closing it."""
    finished: list[str] = []
    call = _waiting(finished).invoke("{}")
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(call)
        loop.run_until_complete(asyncio.sleep(0))  # the call's first step: suspended
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    call.close()  # raised RuntimeError
    assert finished == ["closed"]
