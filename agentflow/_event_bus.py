"""The event bus: hands each event to the run's callbacks and :meth:`Fleet.stream` iterators.

Sync callbacks are called inline, where the event happens (for tokens: on the stream's
hot path), and :meth:`Fleet.stream` iterators' queues are fed there too; async callbacks
are fed, in order, by one dispatcher task. A callback that raises is reported (an
:class:`ErrorEvent` with ``where="callback"``, a log line, and
:attr:`EventBus.callback_errors`) and the run goes on — a ``CancelledError`` of its own
too (one it got from something it awaited that was cancelled), unlike the cancellation
of the run. Like the events (``_events.py``), it imports nothing above them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
from typing import Any, get_args

from agentflow._callables import is_async
from agentflow._callback_failures import (
    CALLBACK_FAILURES_KEPT,
    CallbackFailure,
    CallbackFailures,
)
from agentflow._events import Event
from agentflow._logging import get_logger
from agentflow.typing import Callback

__all__ = [
    "CALLBACK_FAILURES_KEPT",
    "DEFAULT_CALLBACK_DRAIN_S",
    "STOP_WAIT_S",
    "CallbackFailure",
    "EventBus",
]

_log = get_logger("agentflow.events")

#: How long, in seconds, the end of a run waits for async callbacks to take the events
#: still queued for them (``Fleet(callback_drain_s=...)``).
DEFAULT_CALLBACK_DRAIN_S = 30.0
#: How long, in seconds, a stopped delivery (the drain ran out, or the run was cancelled)
#: is waited for once cancelled: a callback ends at its next ``await``; one that ignores
#: its cancellation is left to finish on its own, what it did not deliver recorded.
STOP_WAIT_S = 1.0


class EventBus(CallbackFailures):
    """Fans events out to sync callbacks and stream queues (inline) and async callbacks
    (one task, in order)."""

    def __init__(
        self,
        callbacks: list[Callback] | tuple[Callback, ...] = (),
        *,
        drain_s: float = DEFAULT_CALLBACK_DRAIN_S,
    ) -> None:
        self._drain_s = drain_s  # checked where it is given (Fleet: callback_drain_s)
        # What the dispatcher is handling now: named when the drain at close runs out.
        self._handling: tuple[Any, Event] | None = None
        self._sync: list[Any] = []
        self._async: list[Any] = []
        # Per event type, the sync callbacks that read it (filled as types are first seen)
        # and the async ones: the type filter runs once per type, not once per event.
        self._routes: dict[str, list[Any]] = {}
        self._async_routes: dict[str, list[Any]] = {}
        # Who reads tokens: the sync callbacks, and whether any async one or queue does.
        self._token_sync: tuple[Any, ...] = ()
        self._token_fanout = False
        self._queues: list[asyncio.Queue[Event]] = []
        self._pending: asyncio.Queue[Event | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False  # aclose began: no dispatcher is started again
        # Set when an async callback cancelled the dispatcher (the task it ran in): the
        # error each later event is recorded with, never queued (nothing would take it).
        self._dead: BaseException | None = None
        CallbackFailures.__init__(self)
        for cb in callbacks:
            self.subscribe(cb)

    def subscribe(self, callback: Callback) -> None:
        """Add a sync or async callback.

        A callback is async when it is an ``async def``, an object with an async
        ``__call__``, or a sync wrapper of one made with ``functools.wraps`` (an ordinary
        decorator: its ``__wrapped__`` is followed). A callback object may declare
        ``event_types``, a set of the ``type`` strings it reads; it then receives only
        those. Token events are built only when some
        subscriber reads them, so a callback that declares no ``"token"`` costs nothing
        per streamed delta.
        """
        (self._async if is_async(callback) else self._sync).append(callback)
        self._routes.clear()
        self._async_routes.clear()
        self._token_sync = tuple(cb for cb in self._sync if _reads(cb, "token"))
        self._token_fanout = bool(self._queues) or any(_reads(cb, "token") for cb in self._async)

    def add_queue(self, queue: asyncio.Queue[Event]) -> None:
        """Feed every event to ``queue`` as well (used by :meth:`Fleet.stream`)."""
        self._queues.append(queue)
        self._token_fanout = True

    @property
    def active(self) -> bool:
        """Whether anyone listens at all."""
        return bool(self._sync or self._async or self._queues)

    @property
    def wants_tokens(self) -> bool:
        """Whether anyone reads token events; when not, they are not even built."""
        return bool(self._token_sync) or self._token_fanout

    def token_callbacks(self) -> tuple[Any, ...] | None:
        """The sync callbacks that read token events, in subscription order, or ``None``
        when an async callback or a :meth:`Fleet.stream` queue reads them too.

        A turn's token sink takes this once, when the turn starts, and then calls these
        directly for each delta (no routing per event); a callback that raises is
        reported through :meth:`callback_failed`. ``None`` means tokens must go through
        :meth:`emit`, which keeps the async consumers' order.
        """
        return None if self._token_fanout else self._token_sync

    def wants(self, event_type: str) -> bool:
        """Whether anyone would receive an event of ``event_type`` (the hot path skips
        building the ones nobody reads)."""
        targets = self._routes.get(event_type)
        if targets is None:
            targets = self._routes[event_type] = [cb for cb in self._sync if _reads(cb, event_type)]
        return bool(targets) or bool(self._async) or bool(self._queues)

    def emit(self, event: Event) -> None:
        """Deliver ``event``: :meth:`Fleet.stream` queues and sync callbacks now, async
        callbacks soon and in order.

        The queues are fed here, not by the dispatcher: an async callback that is slow
        or stuck used to hold every :meth:`Fleet.stream` consumer back with it (and,
        once the drain ran out, they lost the run's last events, ``fleet_end`` among
        them). The event is queued before the sync callbacks run, and a sync callback's
        failure is reported after every sync callback had the event: its
        ``ErrorEvent`` follows the event it is about, for every consumer.
        """
        for q in self._queues:
            q.put_nowait(event)
        if self._async:
            if self._pending is None:
                if self._closed:
                    self._undelivered(event)
                else:
                    self._pending = asyncio.Queue()
                    task = self._task = asyncio.get_running_loop().create_task(
                        self._dispatch(self._pending)
                    )
                    task.add_done_callback(self._dispatcher_ended)
            if self._dead is not None:
                self._lose(None, event, self._dead)
            elif self._pending is not None:
                self._pending.put_nowait(event)
        targets = self._routes.get(event.type)
        if targets is None:
            targets = self._routes[event.type] = [cb for cb in self._sync if _reads(cb, event.type)]
        failed: list[tuple[Any, BaseException]] | None = None
        for cb in targets:
            try:
                if (returned := cb(event)) is not None:  # cheap: see not_run
                    self.not_run(cb, returned)
            except (Exception, asyncio.CancelledError) as exc:  # a sync call: never the task's
                failed = [] if failed is None else failed
                failed.append((cb, exc))
        if failed is not None:  # reported once every sync callback had the event
            for cb, error in failed:
                self.callback_failed(cb, event, error)

    async def _dispatch(self, pending: asyncio.Queue[Event | None]) -> None:
        routes = self._async_routes
        while (event := await pending.get()) is not None:
            targets = routes.get(event.type)
            if targets is None:
                targets = routes[event.type] = [cb for cb in self._async if _reads(cb, event.type)]
            for cb in targets:
                self._handling = (cb, event)
                try:
                    returned = cb(event)
                    if inspect.isawaitable(returned):  # not for a wrapper that returns None
                        await returned
                except Exception as exc:
                    self.callback_failed(cb, event, exc)
                except asyncio.CancelledError as exc:
                    if _being_cancelled():
                        raise  # the delivery is: the drain ran out, or the run was cancelled
                    # The callback's own (it awaited something that was cancelled): it
                    # used to end the dispatcher, and every later event with it.
                    self.callback_failed(cb, event, exc)
            self._handling = None

    def _dispatcher_ended(self, task: asyncio.Task[None]) -> None:
        """The dispatcher ended before :meth:`aclose` began: an async callback cancelled
        it (the task it ran in). Every event queued for it, and each one emitted later,
        is recorded as not delivered (:meth:`_lose`): they used to be queued for the
        rest of the run, for nothing (20 sessions of 300 tokens: 5,700 kept and
        recorded)."""
        if self._closed or self._task is not task or not task.cancelled():
            return  # aclose handles it (or an error aclose raises)
        self._dead = asyncio.CancelledError(
            "an async callback cancelled the task delivering events to async callbacks: "
            "this event and every later one not delivered to them"
        )
        if self._pending is not None:
            self._record_left(self._pending, None, by_callback=True)

    async def aclose(self, *, cancelled: bool = False) -> None:
        """Wait until every emitted event reached every async consumer, for at most the
        bus's ``drain_s`` seconds; ``cancelled``: the run was cancelled, so wait for
        nothing.

        A stalled async callback (an HTTP post with no timeout) used to hang the run's
        end forever. When the bound runs out, the dispatcher is cancelled and each event
        it did not deliver is recorded as a callback failure (the first
        :data:`CALLBACK_FAILURES_KEPT`, the rest counted: :meth:`_lose`; a :class:`TimeoutError`,
        with the callback it was stuck in), logged once; no event reports it, the run
        is over. A cancelled run (a timeout around it, SIGTERM, Ctrl-C) does not wait
        the drain out for a stalled callback: the dispatcher is cancelled at once (also
        when the cancel arrives during the drain) and what it did not deliver is
        recorded the same way, with a ``CancelledError``, before it is raised; so it
        is when an async callback cancelled the dispatcher itself (the task it runs in),
        which is not raised: the caller was not cancelled.

        Once it began, no dispatcher is started again: an event emitted later (an async
        callback failing on the run's last events reports an ``ErrorEvent``) goes to the
        sync callbacks and stream queues only, and is recorded as not delivered to the async ones (a
        ``RuntimeError``). It used to start a new dispatcher that nothing closed, one
        task left behind per run.
        """
        self._closed = True
        pending, task = self._pending, self._task
        if pending is None or task is None:
            return
        self._pending = self._task = None
        pending.put_nowait(None)
        if cancelled:
            await self._stop(task, pending, None)
            return
        limit = self._drain_s
        try:
            await asyncio.wait({task}, timeout=None if math.isinf(limit) else limit)
        except asyncio.CancelledError:
            # The run is cancelled while it waits: so is the delivery, and what it did
            # not deliver is recorded (it used to vanish, unlogged).
            await self._stop(task, pending, None)
            raise
        if task.done():
            if task.cancelled():
                # Nothing cancelled the run (it would have reached the wait above): an
                # async callback cancelled the task it ran in, the dispatcher. That is
                # its failure; it used to be raised out of Fleet.run as the run's own.
                self._record_left(pending, None, by_callback=True)
                return
            await task  # (what a callback raised that was no Exception, as before)
            return
        await self._stop(task, pending, limit)

    async def _stop(
        self, task: asyncio.Task[None], pending: asyncio.Queue[Event | None], limit: float | None
    ) -> None:
        """Cancel the dispatcher ``task`` and record what it did not deliver: the drain
        ran out after ``limit`` seconds, or (``None``) the run was cancelled.

        The wait for the cancelled dispatcher ends with it (at its callback's next
        ``await``), after :data:`STOP_WAIT_S` (a callback that ignores its cancellation
        is not waited for: the run's own cancel or deadline would be overrun), or at a
        further cancel of the caller's, which is raised once what is left has been
        recorded all the same."""
        task.cancel()
        try:
            await asyncio.wait({task}, timeout=STOP_WAIT_S)
        finally:
            self._record_left(pending, limit)
            if not task.done():  # a callback held on past the cancel: once it returns,
                pending.put_nowait(None)  # the dispatcher ends (its queue was emptied)

    def _record_left(
        self,
        pending: asyncio.Queue[Event | None],
        limit: float | None,
        *,
        by_callback: bool = False,
    ) -> None:
        """Record what the ended dispatcher did not deliver (the event it was handling,
        then those queued): the drain ran out after ``limit`` seconds, or (``None``) the
        run was cancelled — or, ``by_callback``, an async callback cancelled the
        dispatcher itself."""
        stuck = self._handling
        self._handling = None
        left = [(stuck[0], stuck[1])] if stuck is not None else []
        while not pending.empty():
            event = pending.get_nowait()
            if event is not None:
                left.append((None, event))
        if not left:
            return
        error: BaseException
        if by_callback:
            error = self._dead or asyncio.CancelledError(
                "an async callback cancelled the task delivering events to async callbacks: "
                f"{len(left)} event(s) not delivered"
            )
        elif limit is None:
            error = asyncio.CancelledError(
                f"the run was cancelled: {len(left)} event(s) not delivered to async callbacks"
            )
        else:
            error = TimeoutError(
                f"async callbacks did not finish within callback_drain_s={limit:g} s of the "
                f"run's end: {len(left)} event(s) not delivered"
            )
        for cb, event in left:
            self._lose(cb, event, error)
        _log.warning(
            "callback.drain_timeout" if limit is not None else "callback.undelivered",
            callback=getattr(stuck[0], "__qualname__", repr(stuck[0])) if stuck else None,
            undelivered=len(left),
            drain_s=limit,
        )

    def _undelivered(self, event: Event) -> None:
        """``event`` was emitted after :meth:`aclose` began: record that the async
        consumers never get it."""
        error = RuntimeError(
            f"{event.type} event emitted after the run's end began: "
            "not delivered to async callbacks"
        )
        self._lose(None, event, error)
        _log.warning("callback.undelivered", event_type=event.type, after_close=True)


def _being_cancelled() -> bool:
    """Whether the running task has been asked to cancel (a ``CancelledError`` caught in
    it is then that request's, not one a callback raised of its own)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _reads(callback: Any, event_type: str) -> bool:
    types = getattr(callback, "event_types", None)  # (_fleet_checks.check_event_types)
    return types is None or event_type in types


@functools.cache
def event_type_names() -> frozenset[str]:
    """Every event's ``type``: those of the :data:`~agentflow.Event` union's members
    (the context events' too), read from their classes."""
    return frozenset(inspect.signature(c).parameters["type"].default for c in get_args(Event))
