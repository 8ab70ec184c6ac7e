"""A ``CancelledError`` that is not the caller's does not make ``Fleet.run`` raise when
every session completed: a callback that cancels the task it runs in is that
callback's failure, not a cancellation of the run.

- An async callback runs in the bus's dispatcher: cancelling it ended the dispatcher
  cancelled, and the run's end re-raised that out of ``Fleet.run``.
- A sync callback runs in the session's task: cancelling it ended that task cancelled
  though the session had completed, and a fleet that runs a task per session (a context
  policy, a resumed session) raised ``CancelledError`` for it, the result lost — on
  ``Fleet.resume`` too, whose sessions are rebuilt from the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from agentflow import Agent, Event, Fleet
from agentflow._event_bus import CALLBACK_FAILURES_KEPT, EventBus
from agentflow._events import FleetStartEvent
from agentflow.context import CacheBusterCheck
from agentflow.store import SQLiteStore
from agentflow.testing import MockTransport, Reply

from .wait import GUARD_S


def _transport() -> MockTransport:
    return MockTransport(lambda request: Reply.text("a b"))


async def test_an_async_callback_cancelling_the_dispatcher_is_its_failure() -> None:
    async def on_event(event: Event) -> None:
        if event.type == "turn_end":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()

    sessions = [Agent(name="a", model="m").session("hi") for _ in range(3)]
    result = await asyncio.wait_for(
        Fleet(_transport(), callbacks=[on_event]).run(sessions), GUARD_S
    )
    assert [r.status for r in result.sessions] == ["completed"] * 3
    assert result.callback_errors  # what it did not deliver, recorded
    assert all(isinstance(f.error, asyncio.CancelledError) for f in result.callback_errors)
    assert "an async callback cancelled" in str(result.callback_errors[0].error)
    me = asyncio.current_task()
    assert me is not None and me.cancelling() == 0


def _cancels_own_task_once(cancelled: list[bool]) -> Callable[[Event], None]:
    """A sync callback that, at the first turn's end, cancels the task it runs in (the
    session's) and notes it in ``cancelled``."""

    def on_event(event: Event) -> None:
        if event.type == "turn_end" and not cancelled:
            cancelled.append(True)
            task = asyncio.current_task()
            assert task is not None
            task.cancel()

    return on_event


@pytest.mark.parametrize("context", [None, CacheBusterCheck()], ids=["queued", "task-each"])
async def test_a_sync_callback_cancelling_the_session_task_loses_no_result(
    context: CacheBusterCheck | None,
) -> None:
    """With a context policy each session runs in a task of its own from the start (the
    path that raised); without one, queued (the path that already returned)."""
    cancelled: list[bool] = []
    on_event = _cancels_own_task_once(cancelled)

    agent = Agent(name="a", model="m", context=context)
    sessions = [agent.session("hi") for _ in range(3)]
    result = await asyncio.wait_for(
        Fleet(_transport(), callbacks=[on_event]).run(sessions), GUARD_S
    )
    assert cancelled
    assert [r.status for r in result.sessions] == ["completed"] * 3
    assert [s.result for s in sessions] == result.sessions


async def test_a_sync_callback_cancelling_a_resumed_session_task_loses_no_result(
    tmp_path: Path,
) -> None:
    """``Fleet.resume`` runs each session as rebuilt from the store, not the session the
    run's result is read from: the run still raised ``CancelledError`` there."""
    calls = 0

    def reply(request: object) -> Reply:
        nonlocal calls
        calls += 1
        if calls <= 2:  # the first run: both sessions fail
            raise RuntimeError("boom")
        return Reply.text("a b")

    agent = Agent(name="a", model="m")
    async with SQLiteStore(tmp_path / "runs.db") as store:
        first = await Fleet(MockTransport(reply), store=store).run(
            [agent.session("hi") for _ in range(2)]
        )
        assert [r.status for r in first.sessions] == ["error"] * 2
        cancelled: list[bool] = []
        on_event = _cancels_own_task_once(cancelled)

        fleet = Fleet(MockTransport(reply), store=store, callbacks=[on_event])
        assert first.run_id is not None
        result = await asyncio.wait_for(fleet.resume(first.run_id, agents=[agent]), GUARD_S)
        assert cancelled
        assert [r.status for r in result.sessions] == ["completed"] * 2
        # Recorded as ended: resuming again runs nothing.
        sent = calls
        again = await asyncio.wait_for(
            Fleet(MockTransport(reply), store=store).resume(first.run_id, agents=[agent]),
            GUARD_S,
        )
        assert [r.status for r in again.sessions] == ["completed"] * 2
        assert calls == sent


async def test_events_after_an_async_callback_cancelled_the_dispatcher_are_capped() -> None:
    """Once an async callback has cancelled the dispatcher, no event is queued for it any
    more, and only the first ``CALLBACK_FAILURES_KEPT`` undelivered ones are kept: every
    token of the rest of the run used to be queued, then recorded (20 sessions of 300
    tokens: 5,739 failures kept)."""

    class OnTurnEnd:
        async def __call__(self, event: Event) -> None:
            if event.type == "turn_end":
                task = asyncio.current_task()
                assert task is not None
                task.cancel()

    text = " ".join(["w"] * 100)
    transport = MockTransport(lambda request: Reply.text(text))
    fleet = Fleet(transport, callbacks=[OnTurnEnd()], max_concurrency=1)
    sessions = [Agent(name="a", model="m").session("hi") for _ in range(5)]
    result = await asyncio.wait_for(fleet.run(sessions), GUARD_S)
    assert [r.status for r in result.sessions] == ["completed"] * 5
    assert len(result.callback_errors) == CALLBACK_FAILURES_KEPT
    assert all(isinstance(f.error, asyncio.CancelledError) for f in result.callback_errors)
    assert "an async callback cancelled" in str(result.callback_errors[0].error)
    assert result.callback_errors_dropped > 300  # the other sessions' tokens, counted


async def test_no_event_is_queued_for_a_dispatcher_a_callback_cancelled() -> None:
    async def on_event(event: Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()

    bus = EventBus([on_event])
    bus.emit(FleetStartEvent(sessions=1, start_ns=0))
    dispatcher = bus._task
    assert dispatcher is not None
    await asyncio.wait({dispatcher}, timeout=GUARD_S)
    assert dispatcher.cancelled()
    await asyncio.sleep(0)  # (its done callback)
    for i in range(1, 51):
        bus.emit(FleetStartEvent(sessions=1, start_ns=i))
    assert bus._pending is not None and bus._pending.empty()  # not kept for nothing
    await bus.aclose()
    assert len(bus.callback_errors) == CALLBACK_FAILURES_KEPT
    # (the first event reached the callback: the 50 later ones did not)
    assert bus.callback_errors_dropped == 50 - CALLBACK_FAILURES_KEPT
    assert [getattr(f.event, "start_ns", None) for f in bus.callback_errors] == list(
        range(1, CALLBACK_FAILURES_KEPT + 1)
    )
