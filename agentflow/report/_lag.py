"""How busy the client's own event loop is: :class:`LoopLagProbe`.

A transport stamps each read when its callback runs. A read whose bytes reached the
socket while the loop was busy running other callbacks waits until the loop polls again
and reaches it: at most about one loop *iteration*. So the probe measures iterations:
every ``interval_s`` it queues a callback (which runs first in the next iteration) that
queues a second one (which runs first in the iteration after); the time between the two
is one whole iteration — every callback it ran plus the poll. On an idle loop that is a
few microseconds; a client that cannot keep up with its streams sees it grow to
milliseconds, and every latency it measures may be late by up to that much.

A sample also counts how late its timer fired: a callback that holds the loop for 40 ms
delays the probe's timer as it delays every read queued behind it, but the iteration the
probe then times is the short one *after* the block. So each sample is the larger of the
iteration and the timer's lateness beyond 1 ms (asyncio's epoll loop waits in whole
milliseconds, so an idle loop's timers fire up to ~1 ms late). The raw lateness is
kept too (``wakeup_late``); it also shows the process waiting for a CPU, which an
iteration's length cannot show, since a descheduled, idle loop runs no iteration.

Both go to :class:`~agentflow.stats.Sketch` objects (bounded memory, 1 % relative
error); :meth:`LoopLagProbe.summary` is what reports carry (``run.loop_lag``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow.stats import Sketch

__all__ = ["LoopLagProbe"]

#: How late an idle loop's timer may fire (epoll's whole-millisecond wait), in seconds:
#: lateness up to this much is not counted as lag.
_TIMER_SLACK_S = 1e-3


class LoopLagProbe:
    """Samples the event loop's lag while it runs: one iteration's time, or how late the
    probe's timer fired beyond 1 ms if that is larger (see the module).

    Use ``async with LoopLagProbe() as probe:`` around the run (or :meth:`start` /
    :meth:`stop`), then read :meth:`summary`.

    Args:
        interval_s: time between samples (each costs two callbacks: ~2 µs).
        clock: nanoseconds (injectable for tests).

    Raises:
        ConfigError: ``interval_s`` is not a finite number of seconds > 0 (a bool is not one).
    """

    def __init__(
        self, interval_s: float = 0.01, *, clock: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        check_seconds(interval_s, "LoopLagProbe.interval_s", 1e-9, MAX_TIMEOUT_S)
        self.interval_s = interval_s
        self.clock = clock
        #: Every sample (the iteration, or the timer's lateness if larger), in seconds.
        self.sketch = Sketch()
        #: How late each timer fired, in seconds (see the module doc).
        self.wakeup_late = Sketch()
        #: The latest sample, in seconds (``None`` before the first).
        self.last_s: float | None = None
        #: The largest sample in the current window (see :meth:`take_window_max`).
        self._window_max = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._t1 = 0
        self._due = 0.0
        self._late = 0.0
        self._running = False

    def start(self) -> None:
        """Start sampling on the running loop."""
        if self._running:
            return
        self._loop = asyncio.get_running_loop()
        self._running = True
        self._schedule()

    def stop(self) -> None:
        """Stop sampling (samples taken so far are kept)."""
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def __aenter__(self) -> LoopLagProbe:
        self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = self._loop.time() + self.interval_s
        self._timer = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        if self._running and self._loop is not None:
            self._late = max(0.0, self._loop.time() - self._due)
            self.wakeup_late.add(self._late)
            self._loop.call_soon(self._hop1)

    def _hop1(self) -> None:
        if self._running and self._loop is not None:
            self._t1 = self.clock()
            self._loop.call_soon(self._hop2)

    def _hop2(self) -> None:
        if not self._running or self._loop is None:
            return
        lag = max((self.clock() - self._t1) * 1e-9, self._late - _TIMER_SLACK_S)
        self.sketch.add(lag)
        self.last_s = lag
        if lag > self._window_max:
            self._window_max = lag
        self._schedule()

    def take_window_max(self) -> float:
        """The largest sample since the last call (for a live display), in seconds."""
        m, self._window_max = self._window_max, 0.0
        return m

    def summary(self) -> dict[str, Any]:
        """``{"definition", "interval_s", "count", "mean_s", "p50_s", "p90_s", "p99_s",
        "max_s", "wakeup_late_p99_s"}`` (seconds; ``None`` before any sample)."""
        sk = self.sketch
        return {
            "definition": "one event-loop iteration (callbacks run + poll), or its timer's "
            "lateness beyond 1 ms if larger, sampled",
            "interval_s": self.interval_s,
            "count": sk.count,
            "mean_s": sk.mean,
            "p50_s": sk.quantile(0.5),
            "p90_s": sk.quantile(0.9),
            "p99_s": sk.quantile(0.99),
            "max_s": sk.max,
            "wakeup_late_p99_s": self.wakeup_late.quantile(0.99),
        }
