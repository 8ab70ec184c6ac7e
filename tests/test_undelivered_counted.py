"""Events an async callback never took, because it hung past ``callback_drain_s``: the
first ten are kept in ``FleetResult.callback_errors``, the rest counted in
``callback_errors_dropped`` — counted as the bus closes, after the result was made, so
the result read 0 dropped of 897 lost. Every event is accounted for."""

from __future__ import annotations

import asyncio

from agentflow import Agent, Event, Fleet
from agentflow.embedded import run_virtual
from agentflow.testing import MockTransport, Reply


def test_every_event_a_hung_callback_did_not_take_is_accounted_for() -> None:
    seen: list[Event] = []

    async def hangs(event: Event) -> None:
        if event.type == "token":
            await asyncio.Event().wait()

    async def main() -> tuple[int, int]:
        fleet = Fleet(
            MockTransport(lambda _: Reply.text(" ".join(["w"] * 50))),
            callbacks=[seen.append, hangs],
            callback_drain_s=0.2,
        )
        result = await fleet.run([Agent(name="a", model="m").session("hi") for _ in range(3)])
        return len(result.callback_errors), result.callback_errors_dropped

    kept, dropped = run_virtual(main())
    first = next(i for i, e in enumerate(seen) if e.type == "token")
    assert kept == 10
    assert kept + dropped == len(seen) - first  # the one it hung on, and every later one
