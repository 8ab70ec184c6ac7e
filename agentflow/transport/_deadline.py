"""First-token, idle and total time limits for one stream, at almost no cost per read.

One ``asyncio.Timeout`` covers the first-token and total limits (rescheduled once, when
the first output arrives). The idle limit is a watchdog re-armed *lazily*: each read
that completed at least one SSE data event stores its timestamp in :attr:`last_ns`
(reads of headers, comments or partial events do not, so keep-alive comments alone
cannot hold a stream open); the watchdog wakes once per idle period, and re-arms for
the remainder if a data event came in meanwhile. aiohttp's own ``sock_read`` timeout would
instead cancel and re-create a timer on every read (~3 µs each, measured).
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from agentflow._errors import StreamPhase, StreamTimeout
from agentflow._trace import TurnTrace
from agentflow.transport._request import Timeouts
from agentflow.typing import Clock

__all__ = ["Deadlines"]


class Deadlines:
    """The limits of one stream; enter :meth:`scope` around it, set :attr:`last_ns` per
    read that completed a data event."""

    __slots__ = (
        "_clock",
        "_first_at",
        "_handle",
        "_loop",
        "_scope",
        "_total_at",
        "expired",
        "last_ns",
        "timeouts",
    )

    def __init__(self, timeouts: Timeouts, clock: Clock, sent_ns: int) -> None:
        self.timeouts = timeouts
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        start = self._loop.time()
        self._total_at = None if timeouts.total is None else start + timeouts.total
        self._first_at = None if timeouts.first_token is None else start + timeouts.first_token
        #: Clock time of the latest read that completed a data event (the request's send
        #: time before any): the transports set it, the idle watchdog reads it.
        self.last_ns = sent_ns
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
        first, total = self._first_at, self._total_at
        when = first if total is None else total if first is None else min(first, total)
        self._scope = scope = asyncio.timeout_at(when)
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

    def first_output(self) -> None:
        """The first output arrived: from now on only the total limit (and idle) apply."""
        self._first_at = None
        if self._scope is not None:
            self._scope.reschedule(self._total_at)

    def _check_idle(self) -> None:
        idle = self.timeouts.idle
        assert idle is not None
        assert self._scope is not None
        quiet = (self._clock() - self.last_ns) * 1e-9
        if quiet >= idle:
            self.expired = "idle"
            self._scope.reschedule(self._loop.time())
        else:
            self._handle = self._loop.call_later(idle - quiet, self._check_idle)

    def cancel(self) -> None:
        """Stop the watchdog (the stream ended)."""
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
