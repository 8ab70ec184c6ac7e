"""The :class:`Fleet`: many sessions at once, under one concurrency bound, one event bus."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from agentflow._admission import ConcurrencyGate
from agentflow._errors import ConfigError
from agentflow._events import CallbackFailure, Event, EventBus, FleetEndEvent
from agentflow._logging import get_logger
from agentflow._session import Session, SessionResult
from agentflow.typing import Callback, Clock, Transport

__all__ = ["Fleet", "FleetResult"]

_log = get_logger("agentflow.fleet")


@dataclass(slots=True, kw_only=True)
class FleetResult:
    """Every session's result, in the order the sessions were given.

    Attributes:
        sessions: one :class:`SessionResult` per session.
        wall_s: wall time of the run.
        peak_in_flight: the most model requests that were in flight at once.
        callback_errors: every callback that raised, with the event it was handling.
    """

    sessions: list[SessionResult]
    wall_s: float
    peak_in_flight: int
    callback_errors: list[CallbackFailure] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        """Output tokens over every turn of every session."""
        return sum(s.output_tokens for s in self.sessions)

    @property
    def output_tps(self) -> float:
        """Fleet throughput: output tokens / wall time of the run."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def failed(self) -> list[SessionResult]:
        """Sessions that did not reach a final answer."""
        return [s for s in self.sessions if not s.ok]


class Fleet:
    """Runs sessions concurrently against one transport.

    Args:
        transport: where model turns go (:class:`HTTPTransport`, :class:`OpenAITransport`, …).
        max_concurrency: the most model requests in flight at once. Sessions between
            turns (running tools) hold no slot.
        max_tool_concurrency: the most tool calls running at once, fleet-wide.
        callbacks: sync or async callables, each called with every :data:`Event`.
        clock: nanosecond monotonic clock for queue waits and tool durations.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        max_concurrency: int = 64,
        max_tool_concurrency: int = 64,
        callbacks: Iterable[Callback] = (),
        clock: Clock = time.perf_counter_ns,
    ) -> None:
        if not isinstance(max_tool_concurrency, int) or max_tool_concurrency < 1:
            raise ConfigError(
                f"max_tool_concurrency must be an int ≥ 1, got {max_tool_concurrency!r}"
            )
        self.transport = transport
        self.max_concurrency = max_concurrency
        self.max_tool_concurrency = max_tool_concurrency
        ConcurrencyGate(max_concurrency)  # validate now, not at run time
        self._callbacks = list(callbacks)
        self._clock = clock

    def subscribe(self, callback: Callback) -> None:
        """Add a callback for every later run."""
        self._callbacks.append(callback)

    async def run(self, sessions: Iterable[Session]) -> FleetResult:
        """Run every session to its end and return their results.

        A failed session does not stop the others; its error is on its result.
        """
        return await self._run(list(sessions), EventBus(self._callbacks))

    async def stream(self, sessions: Iterable[Session]) -> AsyncIterator[Event]:
        """Run the sessions and yield every event; the last is a :class:`FleetEndEvent`.

        Leaving the loop early cancels the run.
        """
        bus = EventBus(self._callbacks)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        bus.add_queue(queue)
        task = asyncio.create_task(self._run(list(sessions), bus))
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, FleetEndEvent):
                    break
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run(self, sessions: list[Session], bus: EventBus) -> FleetResult:
        _check_unique(sessions)
        gate = ConcurrencyGate(self.max_concurrency)
        tool_limit = asyncio.Semaphore(self.max_tool_concurrency)
        start = self._clock()
        _log.info("fleet.start", sessions=len(sessions), max_concurrency=self.max_concurrency)
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(
                        s.run(
                            self.transport,
                            bus=bus,
                            gate=gate,
                            tool_limit=tool_limit,
                            clock=self._clock,
                        ),
                        name=s.session_id,
                    )
                    for s in sessions
                ]
            result = FleetResult(
                sessions=[t.result() for t in tasks],
                wall_s=(self._clock() - start) * 1e-9,
                peak_in_flight=gate.peak_in_flight,
                callback_errors=bus.callback_errors,
            )
            _log.info("fleet.end", wall_s=result.wall_s, failed=len(result.failed))
            bus.emit(FleetEndEvent(result=result))
        finally:
            await bus.aclose()
        return result


def _check_unique(sessions: list[Session]) -> None:
    seen: set[str] = set()
    for s in sessions:
        if s.session_id in seen:
            raise ConfigError(f"two sessions share session_id {s.session_id!r}")
        if s.result is not None:
            raise ConfigError(f"session {s.session_id!r} has already run")
        seen.add(s.session_id)
