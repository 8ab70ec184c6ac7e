"""A session queued as its first turn's ticket, with no task until that turn is granted.

A fleet whose sessions need nothing run before their first turn ranks every first turn
up front (``Scheduler.offer``); each heap entry's waiter is a :class:`_Queued`, and the
:class:`_Starter` starts the session's task when the scheduler grants its turn (see
``docs/architecture.md``, "Scheduling is a heap of ranks"). The run is in ``_fleet_run.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentflow.sched import Grant

if TYPE_CHECKING:
    from agentflow._event_bus import EventBus
    from agentflow._session import Session
    from agentflow.sched import TurnRunner
    from agentflow.typing import Clock


class _Starter:
    """Starts a queued session's task when its first turn is granted, and keeps the
    run's task group open until every queued session has started."""

    __slots__ = ("_bus", "_clock", "_left", "_runner", "_tg", "_tool_limit", "all_started")

    def __init__(
        self,
        tg: asyncio.TaskGroup,
        runner: TurnRunner,
        bus: EventBus,
        tool_limit: asyncio.Semaphore,
        clock: Clock,
        count: int,
    ) -> None:
        self._tg = tg
        self._runner = runner
        self._bus = bus
        self._tool_limit = tool_limit
        self._clock = clock
        self._left = count
        self.all_started: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def start(self, session: Session, first: Grant | BaseException) -> None:
        """Run ``session`` from its granted first turn (or the error that failed it)."""
        coro = session._run(self._runner, self._bus, self._tool_limit, self._clock, first)
        try:
            task = self._tg.create_task(coro, name=session.session_id)
        except RuntimeError:  # the group is shutting down: the run is being cancelled
            coro.close()
            if isinstance(first, Grant):
                self._runner.scheduler.release(first, used_tokens=None, ok=None)
            self._cancelled(session)
        else:
            task.add_done_callback(if_never_ran(session, self._runner, self._bus, first))
        self._left -= 1
        if self._left == 0 and not self.all_started.done():
            self.all_started.set_result(None)

    async def keep(self, queued: list[_Queued]) -> None:
        """Wait until every queued session has started; if the run is cancelled first,
        end those still queued as cancelled (as their tasks would have)."""
        try:
            await self.all_started
        except asyncio.CancelledError:
            for q in queued:
                if q.cancel():
                    self._cancelled(q.session)
            raise

    def _cancelled(self, session: Session) -> None:
        session._end(self._runner, self._bus, "cancelled", None, asyncio.CancelledError())


def if_never_ran(
    session: Session, runner: TurnRunner, bus: EventBus, first: Grant | BaseException | None
) -> Callable[[asyncio.Task[Any]], None]:
    """A done callback for ``session``'s task: a task cancelled before its first step
    (the run cancelled in the loop pass it was made in) never ran the session, whose own
    ``finally`` would have ended it — so end it as cancelled here (its result, its end
    event and record), and give back the turn ``first`` granted it, if any."""

    def check(task: asyncio.Task[Any]) -> None:
        if task.cancelled() and session.result is None:
            if isinstance(first, Grant):
                runner.scheduler.release(first, used_tokens=None, ok=None)
            session._end(runner, bus, "cancelled", None, asyncio.CancelledError())

    return check


class _Queued:
    """A session queued as its first turn's ticket (a scheduler :class:`Waiter`):
    no task, coroutine or turn state until the scheduler grants the turn."""

    __slots__ = ("_starter", "_state", "session")

    def __init__(self, session: Session, starter: _Starter) -> None:
        self.session = session
        self._starter = starter
        self._state = 0  # 1: started, 2: cancelled

    def done(self) -> bool:
        return self._state != 0

    def cancel(self) -> bool:
        if self._state:
            return False
        self._state = 2
        return True

    def set_result(self, grant: Grant, /) -> None:
        self._state = 1
        self._starter.start(self.session, grant)

    def set_exception(self, exc: BaseException, /) -> None:
        self._state = 1
        self._starter.start(self.session, exc)
