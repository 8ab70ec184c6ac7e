"""A model turn's stream events: its tokens, and a discard for each failed attempt.

A turn may take several attempts (:class:`~agentflow.sched.TurnRunner` retries); each
streams the turn from its first token. :class:`TurnEvents` builds the turn's
``TokenEvent``s (only when someone reads them), counts what the current attempt
emitted, and when an attempt fails announces an :class:`AttemptDiscardedEvent` with
those counts — before the attempt's :class:`RetryEvent`, or on its own when it was the
last attempt — so a consumer of tokens knows to drop them.

In a worker process (``Fleet(workers=N)``) the run sets :data:`WATCH`: each turn's sink
is registered with it, and the worker tells the parent, with each batch of events it
forwards, the counts of the attempts it is streaming (``_workers/_open_turns.py``) — so
the parent can retract them should the worker be lost.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any, Protocol

from agentflow._event_bus import EventBus
from agentflow._events import AttemptDiscardedEvent, RetryEvent, TokenEvent
from agentflow._logging import get_logger
from agentflow.sched import FailedAttempt, Ticket
from agentflow.typing import DeltaKind

__all__ = ["WATCH", "AttemptWatch", "TurnEvents"]

_log = get_logger("agentflow.session")


class AttemptWatch(Protocol):
    """What a worker keeps of its turns' sinks (``_workers/_open_turns.py``)."""

    def opened(self, sink: _TokenSink) -> None:
        """``sink``'s turn started (its session's earlier turn is over)."""

    def streaming(self, sink: _TokenSink) -> None:
        """``sink`` emitted its first token since the watch last read its counts."""


#: The worker run's watch, for its sessions' tasks (``None``: one process, nothing watched).
WATCH: ContextVar[AttemptWatch | None] = ContextVar("agentflow_attempt_watch", default=None)


class _TokenSink:
    """Turns deltas into :class:`TokenEvent`s, counting the current attempt's.

    The per-token path: one :class:`TokenEvent` per delta, handed straight to the sync
    callbacks that read tokens (taken from the bus when the turn starts, so no routing
    per event); only when an async callback or a :meth:`Fleet.stream` iterator reads
    tokens does the event go through :meth:`EventBus.emit`, which keeps every
    consumer's order.

    Watched (in a worker): its first delta since the watch last read its counts tells
    the watch (``marked`` until it reads them again), so a worker's batch carries the
    counts of only the attempts that streamed since the last one.
    """

    __slots__ = (
        "_bus",
        "_callbacks",
        "_watch",
        "agent",
        "attempt",
        "chars",
        "content_chars",
        "deltas",
        "marked",
        "session_id",
        "turn",
    )

    def __init__(
        self,
        bus: EventBus,
        agent: str,
        session_id: str,
        turn: int,
        watch: AttemptWatch | None = None,
    ) -> None:
        self._bus = bus
        self._callbacks = bus.token_callbacks()  # fixed for the turn
        self._watch = watch
        self.agent = agent
        self.session_id = session_id
        self.turn = turn
        self.attempt = 0  # the attempt streaming: the failed ones before it
        self.deltas = self.chars = self.content_chars = 0
        self.marked = watch is None  # (unwatched: never tells)
        if watch is not None:
            watch.opened(self)

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        if not self.marked:  # (counted below, before this token is forwarded)
            self.marked = True
            assert self._watch is not None
            self._watch.streaming(self)
        self.deltas += 1
        n = len(text)
        self.chars += n
        if kind == "content":
            self.content_chars += n
        event = TokenEvent(
            agent=self.agent,
            session_id=self.session_id,
            turn=self.turn,
            kind=kind,
            text=text,
            t_ns=t_ns,
        )
        callbacks = self._callbacks
        if callbacks is None:
            self._bus.emit(event)
            return
        failed: list[tuple[Any, BaseException]] | None = None
        for cb in callbacks:
            try:
                if (returned := cb(event)) is not None:
                    self._bus.not_run(cb, returned)
            except (Exception, asyncio.CancelledError) as exc:  # a sync call: never the task's
                failed = [] if failed is None else failed
                failed.append((cb, exc))
        if failed is not None:  # reported once every callback had the token (as emit does)
            for cb, error in failed:
                self._bus.callback_failed(cb, event, error)

    def take(self) -> tuple[int, int, int]:
        """The current attempt's counts; the next attempt starts at zero."""
        counts = (self.deltas, self.chars, self.content_chars)
        self.deltas = self.chars = self.content_chars = 0
        self.attempt += 1
        return counts


class TurnEvents:
    """The events of one model turn, across its attempts.

    Args:
        bus: where events go.
        agent, session_id, turn: which turn.

    Attributes:
        sink: the turn's delta sink for the transport, or ``None`` when nobody reads
            tokens (then none are built).
        attempts: failed attempts so far.
    """

    __slots__ = ("_agent", "_bus", "_session_id", "_turn", "attempts", "sink")

    def __init__(self, bus: EventBus, agent: str, session_id: str, turn: int) -> None:
        self._bus = bus
        self._agent = agent
        self._session_id = session_id
        self._turn = turn
        self.sink = (
            _TokenSink(bus, agent, session_id, turn, WATCH.get()) if bus.wants_tokens else None
        )
        self.attempts = 0

    def discard(self, error: BaseException, *, retried: bool) -> None:
        """The current attempt failed: announce it, with what it streamed."""
        deltas, chars, content = self.sink.take() if self.sink is not None else (0, 0, 0)
        self._bus.emit(
            AttemptDiscardedEvent(
                agent=self._agent,
                session_id=self._session_id,
                turn=self._turn,
                attempt=self.attempts,
                deltas=deltas,
                chars=chars,
                content_chars=content,
                retried=retried,
                error=error,
            )
        )
        self.attempts += 1

    def retry(self, _: Ticket, attempt: FailedAttempt) -> None:
        """The runner's ``on_retry``: the discard, then the :class:`RetryEvent`."""
        _log.info("turn.retry", error=repr(attempt.error), wait_s=attempt.wait_s)
        self.discard(attempt.error, retried=True)
        self._bus.emit(
            RetryEvent(
                agent=self._agent, session_id=self._session_id, turn=self._turn, attempt=attempt
            )
        )
