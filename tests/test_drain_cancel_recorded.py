"""A cancel that arrives while the end of a run waits for async callbacks to catch up
(every session has ended, the drain runs) records what was not delivered, as a cancel
before the drain does: each event in ``callback_errors`` with a ``CancelledError`` and a
``callback.undelivered`` log line. They used to vanish: the delivery was cancelled and
nothing said so. Virtual time: the cancel falls due inside the drain's bound."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentflow import Agent, Event, Fleet, FleetEndEvent, FleetResult, HTTPTransport
from agentflow._event_bus import EventBus
from agentflow._events import FleetStartEvent
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import Reply, ScriptedServer

AGENT = Agent(name="a", model="m")
DRAIN_S = 100.0  # the drain's bound
CANCEL_AT_S = 10.0  # the cancel, within it


def _undelivered(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agentflow.events" and "callback.undelivered" in r.getMessage()
    ]


def test_a_cancel_during_a_runs_drain_records_the_undelivered_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentflow")
    ends: list[FleetResult] = []

    async def stalled(event: Event) -> None:  # a webhook post with no timeout
        await asyncio.Event().wait()

    async def main() -> None:
        runs: list[asyncio.Task[FleetResult]] = []

        def cancel_during_the_drain(event: Event) -> None:
            if isinstance(event, FleetEndEvent):
                ends.append(event.result)
                asyncio.get_running_loop().call_later(CANCEL_AT_S, runs[0].cancel)

        async with (
            ScriptedServer([Reply.text("hello world")] * 2) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as t,
        ):
            fleet = Fleet(
                t,
                callbacks=[stalled, cancel_during_the_drain],
                clock=loop_clock,
                callback_drain_s=DRAIN_S,
            )
            runs.append(asyncio.create_task(fleet.run([AGENT.session("hi") for _ in range(2)])))
            with pytest.raises(asyncio.CancelledError):
                await runs[0]

    run_virtual(main())
    [result] = ends  # the run's result, as the fleet_end event carried it
    failures = result.callback_errors
    assert failures, "the undelivered events were not recorded"
    assert failures[0].callback is stalled and failures[0].event.type == "fleet_start"
    assert failures[-1].event.type == "fleet_end"
    assert all(isinstance(f.error, asyncio.CancelledError) for f in failures)
    assert len(_undelivered(caplog)) == 1


def test_a_cancel_during_the_bus_drain_records_what_is_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentflow")

    async def never(event: Event) -> None:
        await asyncio.Event().wait()

    async def main() -> EventBus:
        bus = EventBus([never], drain_s=DRAIN_S)
        bus.emit(FleetStartEvent(sessions=1, start_ns=0))
        bus.emit(FleetStartEvent(sessions=1, start_ns=1))
        closing = asyncio.create_task(bus.aclose())
        asyncio.get_running_loop().call_later(CANCEL_AT_S, closing.cancel)
        with pytest.raises(asyncio.CancelledError):
            await closing
        return bus

    bus = run_virtual(main())
    failures = [(f.callback, getattr(f.event, "start_ns", None)) for f in bus.callback_errors]
    assert failures == [(never, 0), (None, 1)]
    assert all(isinstance(f.error, asyncio.CancelledError) for f in bus.callback_errors)
    assert len(_undelivered(caplog)) == 1
