"""A callback's failure is the callback's: recorded and reported, never the run's end."""

from __future__ import annotations

import asyncio

from agentflow import Agent, Event, Fleet, HTTPTransport
from agentflow.testing import Reply, ScriptedServer

AGENT = Agent(name="writer", model="m")


async def _cancelled_await() -> None:
    """What a callback meets when a task it awaits (a webhook's request) was cancelled."""
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


async def test_a_callbacks_own_cancelled_error_is_its_failure_not_the_runs() -> None:
    """An async callback that raises a ``CancelledError`` of its own (not the run's
    cancellation) used to end the event dispatcher: later events went nowhere,
    ``Fleet.stream`` stopped early, and ``Fleet.run`` and ``Session.run`` raised
    ``CancelledError`` though every session completed. A sync callback raising one
    ended the sessions as cancelled. Now each is that callback's failure."""
    seen: list[str] = []

    async def hooked(event: Event) -> None:
        seen.append(event.type)
        if event.type == "turn_end":
            await _cancelled_await()

    def sync_hooked(event: Event) -> None:
        if event.type == "turn_end":
            raise asyncio.CancelledError

    async with (
        ScriptedServer([Reply.text("hello world")] * 6) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await Fleet(t, callbacks=[hooked, sync_hooked]).run(
            [AGENT.session("hi") for _ in range(2)]
        )
        assert [s.status for s in result.sessions] == ["completed", "completed"]
        failed = [(f.callback, f.event.type) for f in result.callback_errors]
        assert sorted(failed, key=str) == sorted(
            [(hooked, "turn_end")] * 2 + [(sync_hooked, "turn_end")] * 2, key=str
        )
        assert all(isinstance(f.error, asyncio.CancelledError) for f in result.callback_errors)
        assert seen.count("session_end") == 2 and "fleet_end" in seen

        alone = await AGENT.session("hi").run(t, callbacks=[hooked])
        assert alone.status == "completed"

        streamed = [e.type async for e in Fleet(t, callbacks=[hooked]).stream([AGENT.session("x")])]
        assert "session_end" in streamed and streamed[-1] == "fleet_end"
