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
from pathlib import Path

import pytest

from agentflow import Agent, Event, Fleet
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


@pytest.mark.parametrize("context", [None, CacheBusterCheck()], ids=["queued", "task-each"])
async def test_a_sync_callback_cancelling_the_session_task_loses_no_result(
    context: CacheBusterCheck | None,
) -> None:
    """With a context policy each session runs in a task of its own from the start (the
    path that raised); without one, queued (the path that already returned)."""
    cancelled: list[bool] = []

    def on_event(event: Event) -> None:
        if event.type == "turn_end" and not cancelled:
            cancelled.append(True)
            task = asyncio.current_task()
            assert task is not None
            task.cancel()

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

        def on_event(event: Event) -> None:
            if event.type == "turn_end" and not cancelled:
                cancelled.append(True)
                task = asyncio.current_task()
                assert task is not None
                task.cancel()

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
