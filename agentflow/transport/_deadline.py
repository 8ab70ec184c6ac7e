"""First-token, idle and total time limits for one stream, at almost no cost per read.

One ``asyncio.Timeout`` covers the first-token and total limits (rescheduled once, when
the first output arrives: :class:`~agentflow.transport._stream.StreamState` calls
:meth:`Deadlines.first_output`). The idle limit is a watchdog re-armed *lazily*: the stream
state stores the time of each read that completed at least one SSE data event in its own
``last_ns`` (reads of headers, comments or partial events do not, so keep-alive comments
alone cannot hold a stream open); the watchdog reads it once per idle period, and re-arms
for the remainder if a data event came in meanwhile. aiohttp's own ``sock_read`` timeout
would instead cancel and re-create a timer on every read (~3 µs each, measured).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING

from agentflow._errors import StreamPhase, StreamTimeout
from agentflow._trace import TurnTrace
from agentflow.transport._request import Timeouts

if TYPE_CHECKING:
    from agentflow.transport._stream import StreamState

__all__ = ["Deadlines"]


class Deadlines:
    """The limits of one stream (made by its :class:`StreamState`, whose ``last_ns`` the
    idle watchdog reads); enter :meth:`scope` around the stream."""

    __slots__ = (
        "_first_at",
        "_handle",
        "_loop",
        "_scope",
        "_stream",
        "_total_at",
        "expired",
        "timeouts",
    )

    def __init__(self, timeouts: Timeouts, stream: StreamState) -> None:
        self.timeouts = timeouts
        # A reference cycle with the stream state while the stream runs, broken by
        # cancel() (always called when the scope exits): no garbage for the collector.
        self._stream: StreamState | None = stream
        self._loop = asyncio.get_running_loop()
        start = self._loop.time()
        self._total_at = None if timeouts.total is None else start + timeouts.total
        self._first_at = None if timeouts.first_token is None else start + timeouts.first_token
        #: Which limit ran out, once one has.
        self.expired: StreamPhase | None = None
        self._scope: asyncio.Timeout | None = None
        self._handle: asyncio.TimerHandle | None = None

    @property
    def waiting_first(self) -> bool:
        """Whether the first-token limit is still armed."""
        return self._first_at is not None

    def scope(self) -> Deadlines:
        """The context to run the whole stream in (``async with limits.scope():``).

        Leaving it, however, stops the idle watchdog: a request that failed early (no
        connection, an error status) leaves no timer behind, and the transports need no
        ``cancel()`` of their own after it.
        """
        return self

    async def __aenter__(self) -> Deadlines:
        self._scope = scope = asyncio.timeout_at(self.until())
        await scope.__aenter__()
        if self.timeouts.idle is not None:
            self._handle = self._loop.call_later(self.timeouts.idle, self._check_idle)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cancel()
        assert self._scope is not None
        # Turns the cancellation of an expired limit into TimeoutError, as usual.
        await self._scope.__aexit__(exc_type, exc, tb)

    @property
    def ran_out(self) -> bool:
        """Whether one of these limits ran out — a ``TimeoutError`` out of the scope is then
        theirs (:meth:`error`), not one raised by something else inside it."""
        return self._scope is not None and self._scope.expired()

    def first_output(self) -> None:
        """The first output arrived: from now on only the total limit (and idle) apply."""
        self._first_at = None
        if self._scope is not None:
            self._scope.reschedule(self._total_at)

    def until(self) -> float | None:
        """When (loop time) the first-token or total limit, whichever is sooner, runs out;
        None when neither is set. An error answer's body is bounded by it after
        :meth:`met` (see ``_error_body``)."""
        first, total = self._first_at, self._total_at
        return first if total is None else total if first is None else min(first, total)

    def met(self) -> None:
        """The answer is complete (``[DONE]``): no limit applies to what is left of the
        exchange (the rest of the body, drained briefly)."""
        self._first_at = self._total_at = None
        self.cancel()
        if self._scope is not None and not self._scope.expired():
            self._scope.reschedule(None)

    def _check_idle(self) -> None:
        idle = self.timeouts.idle
        assert idle is not None
        assert self._scope is not None
        stream = self._stream
        assert stream is not None  # cancel() stops this watchdog before dropping the stream
        quiet = (stream.clock() - stream.last_ns) * 1e-9
        if quiet >= idle:
            self.expired = "idle"
            self._scope.reschedule(self._loop.time())
        else:
            self._handle = self._loop.call_later(idle - quiet, self._check_idle)

    def cancel(self) -> None:
        """Stop the watchdog (the stream ended)."""
        self._stream = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def error(self, endpoint: str, trace: TurnTrace | None = None) -> StreamTimeout:
        """The :class:`StreamTimeout` for the limit that ran out, with what had arrived."""
        t = self.timeouts
        phase: StreamPhase
        if self.expired == "idle":
            phase, limit = "idle", t.idle
        elif self._first_at is not None and (
            self._total_at is None or self._first_at <= self._total_at
        ):
            phase, limit = "first_token", t.first_token
        else:
            phase, limit = "total", t.total
        what = {
            "idle": "no data event for",
            "first_token": "no output within",
            "total": "not done in",
        }
        return StreamTimeout(
            f"{endpoint}: {what[phase]} {limit} s ({phase} limit)",
            phase=phase,
            timeout_s=limit or 0.0,
            endpoint=endpoint,
            trace=trace,
        )
