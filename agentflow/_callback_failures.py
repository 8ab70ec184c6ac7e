"""What the event bus keeps of its callbacks' failures (``_event_bus.py``): each
callback's first :data:`CALLBACK_FAILURES_KEPT` failures, logged and reported as an
:class:`~agentflow.ErrorEvent`, later ones only counted; and the events that never reached
the async callbacks, kept and counted alike."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from agentflow._events import ErrorEvent, Event
from agentflow._logging import get_logger

__all__ = ["CALLBACK_FAILURES_KEPT", "CallbackFailure", "CallbackFailures"]

_log = get_logger("agentflow.events")

#: How many failures of one callback are kept, logged and reported (an ErrorEvent each);
#: later ones are only counted (:attr:`EventBus.callback_errors_dropped`), so a token
#: callback that fails on every token costs neither memory nor a log line per token.
CALLBACK_FAILURES_KEPT = 10


@dataclass(frozen=True, slots=True)
class CallbackFailure:
    """A callback raised while handling ``event``, or did not take it before the run's
    end waited ``callback_drain_s`` for it (``error`` a :class:`TimeoutError`;
    ``callback`` the async callback that was stuck, ``None`` for an event queued behind
    it that no callback had yet), or before the run was cancelled (the same, ``error``
    a ``CancelledError``), or that was emitted after the run's end began (an async
    callback failing on ``session_end`` or ``fleet_end``: its ``ErrorEvent``; ``callback``
    ``None``, ``error`` a ``RuntimeError``): that one is given to sync callbacks (and
    stream queues) only."""

    callback: Any
    event: Event
    error: BaseException


class CallbackFailures:
    """The failure books of an :class:`~agentflow._event_bus.EventBus` (its base)."""

    def __init__(self) -> None:
        self._lost = 0  # events recorded as not delivered to async callbacks (see _lose)
        #: Callback failures so far: each callback's first :data:`CALLBACK_FAILURES_KEPT`
        #: (only the first of a callback keeps its traceback), and what the end of the
        #: run did not deliver.
        self.callback_errors: list[CallbackFailure] = []
        #: Failures of a callback after its first :data:`CALLBACK_FAILURES_KEPT`, and
        #: events not delivered to async callbacks after the first that many: counted,
        #: not kept, logged (but at 100, 1,000, ... of them) or reported.
        self.callback_errors_dropped = 0
        self._failures: dict[int, int] = {}  # id(callback) → its failures so far

    def emit(self, event: Event) -> None:
        """Hand ``event`` to the callbacks (the bus's)."""
        raise NotImplementedError

    def _lose(self, cb: Any, event: Event, error: BaseException) -> None:
        """Record that ``event`` never reached the async callbacks: the first
        :data:`CALLBACK_FAILURES_KEPT` such events are kept in :attr:`callback_errors`,
        later ones only counted in :attr:`callback_errors_dropped`."""
        self._lost += 1
        if self._lost > CALLBACK_FAILURES_KEPT:
            self.callback_errors_dropped += 1
        else:
            self.callback_errors.append(CallbackFailure(cb, event, error))

    def not_run(self, cb: Any, returned: object) -> None:
        """Sync callback ``cb`` returned ``returned``. When it is an awaitable (a lambda,
        or a wrapper :meth:`subscribe` could not see through, around an ``async def``),
        nothing would ever run it: raise that as the callback's failure (it used to be
        dropped without a word), having closed a coroutine so it does not warn "never
        awaited" later. Any other value is ignored.

        Raises:
            TypeError: ``returned`` is awaitable.
        """
        if not inspect.isawaitable(returned):
            return
        if inspect.iscoroutine(returned):
            returned.close()
        raise TypeError(
            f"callback {getattr(cb, '__qualname__', cb)!r} is sync but returned "
            f"{type(returned).__name__}, which was never run: subscribe the async "
            "function itself (or a functools.wraps wrapper of it)"
        )

    def callback_failed(self, cb: Any, event: Event, exc: BaseException) -> None:
        """``cb`` raised ``exc`` on ``event``: record, log and report it (never raises).

        Only a callback's first :data:`CALLBACK_FAILURES_KEPT` failures are: later ones
        are counted in :attr:`callback_errors_dropped` (a sync token callback failing on
        every token kept ~2.4 KB a token, its traceback's frames, and logged and
        reported each). Only its first failure keeps its traceback.
        """
        n = self._failures[id(cb)] = self._failures.get(id(cb), 0) + 1
        if n > CALLBACK_FAILURES_KEPT:
            self.callback_errors_dropped += 1
            if n == CALLBACK_FAILURES_KEPT + 1 or _power_of_ten(n):
                _log.warning(
                    "callback.failing",
                    callback=getattr(cb, "__qualname__", repr(cb)),
                    failures=n,
                    hint=f"failures after the first {CALLBACK_FAILURES_KEPT} are only counted "
                    "(FleetResult.callback_errors_dropped); logged again at 100, 1000, ...",
                )
            return
        if n > 1:
            exc = exc.with_traceback(None)  # its frames: the first failure's will do
        self.callback_errors.append(CallbackFailure(cb, event, exc))
        _log.warning(
            "callback.failed",
            callback=getattr(cb, "__qualname__", repr(cb)),
            event_type=event.type,
            error=repr(exc),
        )
        if isinstance(event, ErrorEvent) and event.where == "callback":
            return  # never report a failure to report a failure
        self.emit(
            ErrorEvent(
                agent=getattr(event, "agent", None),
                session_id=getattr(event, "session_id", None),
                turn=getattr(event, "turn", None),
                where="callback",
                error=exc,
            )
        )


def _power_of_ten(n: int) -> bool:
    while n and n % 10 == 0:
        n //= 10
    return n == 1
