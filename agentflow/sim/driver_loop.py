"""The driver's step loop in loop time, and its deliveries (see :mod:`agentflow.sim.driver`).

:class:`EngineDriver <agentflow.sim.driver.EngineDriver>` gets its asyncio task's body
(pace each engine step to its end in loop time, resync when late, batch late steps),
the delivery of each step's payloads to the stream consumers, the flush and finish
hooks' calls and the archiving of finished records from :class:`_DriverLoop` here; the
driver module keeps its configuration, lifecycle and requests. The timing rules are
described in :mod:`agentflow.sim.driver`'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from agentflow.sim.engine import Engine
from agentflow.sim.records import RecordArchive, RequestRecord, StepResult
from agentflow.sim.request import SimRequest

__all__: list[str] = []

_log = logging.getLogger("agentflow.sim")


class _DriverLoop:
    """The step loop of :class:`~agentflow.sim.driver.EngineDriver`, which sets this state."""

    engine: Engine
    time_scale: float
    resync_s: float
    max_batch_s: float
    _requests: dict[int, SimRequest]
    _retired: RecordArchive
    _finish_hooks: list[Callable[[RequestRecord], None]]
    _flush_hooks: list[Callable[[], None]]
    _wake: asyncio.Event | None
    _origin: float
    _steps: int
    _late_steps: int
    _resyncs: int
    _lag: float
    _max_late: float
    _flushes: int

    def cancel(self, rid: int) -> bool:
        """Cancel a request; :class:`~agentflow.sim.driver.EngineDriver` defines it."""
        raise NotImplementedError

    # --- The loop ----------------------------------------------------------------------

    def _retire(self, rid: int) -> None:
        try:
            self._retired.add(self.engine.pop_record(rid))
        except (KeyError, ValueError):
            return

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        engine = self.engine
        scale = self.time_scale
        wake = self._wake
        assert wake is not None
        sleep = asyncio.sleep
        max_batch = self.max_batch_s
        last_yield = loop.time()
        flush_cost = 0.0
        try:
            while True:
                if not engine.has_work:
                    self._flush()
                    wake.clear()
                    await wake.wait()
                    last_yield = loop.time()
                    continue
                now = loop.time()
                behind = (now - self._origin) / scale - engine.now
                if behind * scale > self.resync_s:
                    self._resyncs += 1
                    self._lag += behind * scale
                    engine.advance_to(engine.now + behind)
                step = engine.step()
                self._steps += 1
                target = self._origin + step.end_s * scale
                now = loop.time()
                if target > now:
                    await sleep(target - now)
                    now = loop.time()
                    late = now - target
                    if late > self._max_late:
                        self._max_late = late
                    self._deliver(step)
                    self._flush()
                    last_yield = now
                else:
                    # Late: deliver at once and take the next step without yielding,
                    # for at most max_batch_s, so that consumers that buffer can send
                    # several steps in one write; nothing is skipped.
                    self._late_steps += 1
                    late = now - target
                    if late > self._max_late:
                        self._max_late = late
                    self._deliver(step)
                    # A batch lasts at least as long as its flush took last time, so
                    # that writing never takes more than about half of the time.
                    if now - last_yield >= max_batch and now - last_yield >= flush_cost:
                        t0 = loop.time()
                        self._flush()
                        last_yield = loop.time()
                        flush_cost = last_yield - t0
                        await sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _log.exception("the simulator's step loop failed")
            for rid, req in list(self._requests.items()):
                self._requests.pop(rid, None)
                with contextlib.suppress(Exception):
                    req.consumer.on_abort(f"the simulator's engine failed: {exc!r}")
            raise

    def _flush(self) -> None:
        self._flushes += 1
        for hook in self._flush_hooks:
            try:
                hook()
            except Exception:
                _log.exception("a flush hook failed")

    def _deliver(self, step: StepResult) -> None:
        requests = self._requests
        for rid in step.emitted:
            req = requests.get(rid)
            if req is None:
                continue  # cancelled while the step ran
            rec = req.record
            payloads = req._advance(rec)
            last = rec.finish_reason is not None
            if last:
                del requests[rid]
            if payloads:
                try:
                    req._emit(payloads, last)
                except Exception:
                    _log.exception("a stream consumer failed; cancelling %s", req.id)
                    if not last:
                        self.cancel(rid)
                        continue
            if last:
                for hook in self._finish_hooks:
                    try:
                        hook(rec)
                    except Exception:
                        _log.exception("a finish hook failed")
                self._retire(rid)
