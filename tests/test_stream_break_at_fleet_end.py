"""A consumer of ``Fleet.stream`` that leaves the loop at the ``FleetEndEvent`` (the
documented last event) has not left early: the stream's close waits for the run's end,
where async callbacks catch up on the last events. It used to cancel the run there, while
it waited for them: they never got ``session_end`` nor ``fleet_end``. Virtual time: the
async callback is slow by a timer, not by the machine."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agentflow import Agent, Event, Fleet, FleetEndEvent, FleetResult, HTTPTransport
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import Reply, ScriptedServer

AGENT = Agent(name="a", model="m")
SESSIONS = 2


def _stream_and_leave_at_fleet_end(
    got: list[str], ends: list[FleetResult], *, deadline_s: float | None = None
) -> None:
    """The sessions' events streamed by a consumer that breaks at ``fleet_end`` (its
    result put in ``ends``), under a deadline of ``deadline_s``; an async callback takes
    a (virtual) second per event, and puts its type in ``got``."""

    async def webhook(event: Event) -> None:  # posts each event somewhere, a little slowly
        await asyncio.sleep(1.0)
        got.append(event.type)

    async def main() -> None:
        async with (
            ScriptedServer([Reply.text("hello world")] * SESSIONS) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as t,
        ):
            fleet = Fleet(t, callbacks=[webhook], clock=loop_clock, callback_drain_s=600)
            sessions = [AGENT.session("hi") for _ in range(SESSIONS)]
            async with asyncio.timeout(deadline_s):
                async with contextlib.aclosing(fleet.stream(sessions)) as events:
                    async for event in events:
                        if isinstance(event, FleetEndEvent):
                            ends.append(event.result)
                            break

    run_virtual(main())


def test_async_callbacks_get_the_last_events_when_the_consumer_leaves_at_fleet_end() -> None:
    got: list[str] = []
    ends: list[FleetResult] = []
    _stream_and_leave_at_fleet_end(got, ends)
    [result] = ends
    assert [s.status for s in result.sessions] == ["completed"] * SESSIONS
    assert got.count("session_end") == SESSIONS
    assert got[-1] == "fleet_end"
    assert result.callback_errors == []


def test_a_deadline_while_the_stream_waits_past_fleet_end_still_cancels_the_run() -> None:
    """The wait for the run's end is the consumer's to cut short: a deadline falling due
    during it cancels the run (what was not delivered is recorded) and is raised."""
    got: list[str] = []
    ends: list[FleetResult] = []
    with pytest.raises(TimeoutError):
        _stream_and_leave_at_fleet_end(got, ends, deadline_s=3.5)
    [result] = ends
    assert "fleet_end" not in got
    assert result.callback_errors[-1].event.type == "fleet_end"
    assert all(isinstance(f.error, asyncio.CancelledError) for f in result.callback_errors)
