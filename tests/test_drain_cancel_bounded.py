"""A run cancelled while it drains async callbacks stops their delivery without waiting
for a callback that ignores its cancellation (at most ``STOP_WAIT_S`` past the cancel: it
returned at the callback's end, overrunning the caller's deadline), and the result the
run's ``FleetEndEvent`` carries counts what that close could not deliver."""

from __future__ import annotations

import asyncio
import contextlib

from agentflow import Agent, Event, Fleet, FleetEndEvent, FleetResult, HTTPTransport
from agentflow._event_bus import STOP_WAIT_S
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import Reply, ScriptedServer

DEADLINE_S = 5.0


async def _stubborn(event: Event) -> None:
    """An async callback whose clean-up ignores its cancellation (a retried POST)."""
    if event.type != "fleet_end":
        return
    try:
        await asyncio.sleep(100)
    except asyncio.CancelledError:
        await asyncio.sleep(1000)


def test_a_deadline_during_the_drain_is_not_overrun_by_a_stubborn_callback() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        async with (
            ScriptedServer([Reply.text("hi")]) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as http,
        ):
            fleet = Fleet(http, callbacks=[_stubborn], clock=loop_clock, callback_drain_s=600)
            start = loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DEADLINE_S):
                    await fleet.run([Agent(name="a", model="m").session("q")])
            return loop.time() - start

    took = run_virtual(main())
    assert DEADLINE_S <= took <= DEADLINE_S + STOP_WAIT_S + 0.1  # (virtual seconds)


def test_a_cancel_during_the_close_is_counted_on_the_result() -> None:
    sessions = 8
    ends: list[FleetResult] = []

    async def slow(event: Event) -> None:
        await asyncio.sleep(1.0)

    async def main() -> None:
        async with (
            ScriptedServer([Reply.text("hello world")] * sessions) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as http,
        ):
            fleet = Fleet(http, callbacks=[slow], clock=loop_clock, callback_drain_s=600)
            agent = Agent(name="a", model="m")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DEADLINE_S):
                    stream = fleet.stream([agent.session("hi") for _ in range(sessions)])
                    async with contextlib.aclosing(stream) as events:
                        async for event in events:
                            if isinstance(event, FleetEndEvent):
                                ends.append(event.result)
                                break

    run_virtual(main())
    (result,) = ends
    # Every event the slow callback did not get is accounted for: 10 kept, the rest
    # counted as dropped (it read 0 when the cancel came during the bus's close).
    assert len(result.callback_errors) == 10
    assert result.callback_errors_dropped > 0
