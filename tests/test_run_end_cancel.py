"""A cancel that reaches a run as it ends — while its end waits for the scheduler's
dispatcher, or already requested before that wait — is raised, once, and the run's end
still closes everything it started.

- ``Scheduler.aclose`` raising the caller's ``CancelledError`` skipped the close of the
  event bus after it: the async callbacks' dispatcher was left waiting forever (it went
  on delivering events after ``Fleet.run`` had raised, never ``fleet_end``) and
  ``Fleet.in_flight`` read the dead scheduler.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, Event, Fleet, Session
from agentflow.sched._scheduler import cancel_and_wait
from agentflow.testing import MockTransport, Reply

from .wait import GUARD_S


def _transport() -> MockTransport:
    return MockTransport(lambda request: Reply.text("a b"))


def _sessions(n: int) -> list[Session]:
    return [Agent(name="a", model="m").session("hi") for _ in range(n)]


def _dispatchers() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if "EventBus._dispatch" in repr(t.get_coro())]


async def test_a_cancel_while_the_end_waits_for_the_dispatcher_closes_the_bus() -> None:
    """The cancel lands while the run's end awaits the scheduler's dispatcher (one is
    running: fewer slots than sessions), as a deadline falling due then would."""
    got: list[str] = []
    gate = asyncio.Event()  # the async callback holds until the run has raised

    async def slow(event: Event) -> None:
        got.append(event.type)
        await gate.wait()

    def on_end(event: Event) -> None:
        if event.type == "fleet_end":
            me = asyncio.current_task()
            assert me is not None
            asyncio.get_running_loop().call_soon(me.cancel)

    fleet = Fleet(_transport(), callbacks=[slow, on_end], max_concurrency=1)
    run = asyncio.create_task(fleet.run(_sessions(2)))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(run), GUARD_S)
    assert run.cancelled()
    delivered = len(got)
    assert _dispatchers() == []  # the bus was closed: its dispatcher ended with the run
    assert fleet._scheduler is None and fleet.in_flight == 0
    gate.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(got) == delivered  # nothing delivered after the run raised


async def test_a_cancel_requested_during_a_sync_fleet_end_callback_is_raised() -> None:
    """A Ctrl-C while a sync ``fleet_end`` callback runs (``asyncio.run`` cancels its
    main task: pending, delivered at the next wait) was folded into the scheduler's
    dispatcher's own cancellation and swallowed: ``Fleet.run`` returned normally."""

    def on_end(event: Event) -> None:
        if event.type == "fleet_end":
            me = asyncio.current_task()
            assert me is not None
            me.cancel()

    fleet = Fleet(_transport(), callbacks=[on_end], max_concurrency=1)
    run = asyncio.create_task(fleet.run(_sessions(2)))
    done, _ = await asyncio.wait({run}, timeout=GUARD_S)
    assert done, "the run hung"
    assert run.cancelled(), run.result()
    assert fleet._scheduler is None


async def test_the_callers_cancel_hurries_the_tasks_cleanup_then_is_raised() -> None:
    """``cancel_and_wait``: a cancel of the caller's during the wait cancels the task's
    cleanup (awaiting something after its cancel: a store's shielded flush on a dead
    server) — a deadline could not end the wait otherwise; once the task has ended, the
    caller's cancel is raised."""
    cleaned = asyncio.Event()
    step = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await step.wait()  # the cleanup awaits: the caller's cancel cuts it
            cleaned.set()

    task = asyncio.create_task(work())
    try:
        await asyncio.sleep(0)
        closing = asyncio.create_task(cancel_and_wait(task))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        closing.cancel()
        await asyncio.wait({closing}, timeout=GUARD_S)
    finally:
        step.set()
    assert closing.cancelled()
    assert task.cancelled() and not cleaned.is_set()
