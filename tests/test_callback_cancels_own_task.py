"""A ``CancelledError`` that is not the caller's does not make ``Fleet.run`` raise when
every session completed: a callback that cancels the task it runs in is that
callback's failure, not a cancellation of the run.

- An async callback runs in the bus's dispatcher: cancelling it ended the dispatcher
  cancelled, and the run's end re-raised that out of ``Fleet.run``.
- A sync callback runs in the session's task: cancelling it ended that task cancelled
  though the session had completed, and a fleet that runs a task per session (a context
  policy, a resumed session) raised ``CancelledError`` for it, the result lost.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, Event, Fleet
from agentflow.context import CacheBusterCheck
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
