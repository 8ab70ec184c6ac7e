"""The engine on an event loop: :class:`EngineDriver` runs the step loop in loop time.

One driver owns one :class:`~agentflow.sim.engine.Engine`. Requests come in as OpenAI
chat bodies through :meth:`EngineDriver.submit`, each with a :class:`StreamConsumer`;
after every engine step the driver hands each request that produced output its new
payloads — exactly the bytes an SSE stream carries after ``data: `` (see
:mod:`agentflow.sim.frames`) — and says when the stream is complete. The HTTP server
writes them to sockets; an in-process transport can feed them straight into a client's
parser. Either way the bytes are the same.

Time. The driver reads only ``asyncio.get_running_loop().time()`` and sleeps only with
``asyncio.sleep``, so it runs in real time on a normal loop and in virtual time on
:class:`agentflow.embedded._clock.VirtualTimeLoop`, unchanged. Engine seconds map to
loop seconds by ``loop = origin + engine × time_scale`` (``time_scale`` = wall seconds
per engine second; 10 emulates a rack at a tenth of its speed). A step of modelled
duration ``d`` that starts at engine time ``e`` ends — and its tokens are delivered —
at loop time ``origin + (e + d) × time_scale``: the driver sleeps until that absolute
time, so timer jitter never accumulates (on the default selector loop a timer fires
up to ~1 ms late: epoll's resolution). If the loop is late (the process is busy), the
driver skips nothing and does not run faster to catch up: it takes the next step at
once, and when it has fallen more than ``resync_s`` behind it moves the engine clock
forward to the loop (counted as lag in :meth:`EngineDriver.stats`), so ground truth
stays the time tokens were really delivered, on the engine clock. While late it takes
steps back to back for up to ``max_batch_s`` before yielding to the loop; each step's
payloads are still delivered right after it, and flush hooks (see
:meth:`EngineDriver.add_flush_hook`) let a consumer that buffers write once per batch.
With no work the loop task waits on an event (no polling) and
:meth:`~EngineDriver.submit` wakes it; idle time passes on the engine clock too.

The consumer contract and the request handle are in :mod:`agentflow.sim.request`;
bodies are checked in :mod:`agentflow.sim.api`; the step loop and its deliveries are in
:mod:`agentflow.sim.driver_loop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow.sim.api import ChatParams, parse_chat_body, parse_request_id
from agentflow.sim.driver_loop import _DriverLoop
from agentflow.sim.engine import Engine
from agentflow.sim.errors import DriverFailed
from agentflow.sim.records import DriverStats, RecordArchive, RequestRecord
from agentflow.sim.request import SimRequest, StreamConsumer

# ChatParams, DriverStats, SimRequest, StreamConsumer, parse_chat_body and
# parse_request_id live in api, records and request; they stay importable from here.
__all__ = [
    "ChatParams",
    "DriverStats",
    "EngineDriver",
    "SimRequest",
    "StreamConsumer",
    "parse_chat_body",
    "parse_request_id",
]

_log = logging.getLogger("agentflow.sim")


class EngineDriver(_DriverLoop):
    """Runs an :class:`Engine`'s step loop as an asyncio task, in loop time.

    Args:
        engine: the engine to drive (the driver is its only caller from now on).
        time_scale: loop (wall) seconds per engine second; > 0.
        tokens_per_chunk: output tokens per content chunk (speculative decoding and
            stream intervals send several); the first token is always sent alone.
        model: the model name responses report when a request names none (default:
            the profile's).
        keep_records: finished requests whose records (without their output plan) stay
            retrievable by :meth:`record`, oldest forgotten first; the live record stays
            on :attr:`SimRequest.record` for whoever holds the handle.
        resync_s: how far (loop seconds) the loop may fall behind the engine's schedule
            before the engine clock is moved forward to it; below that, lateness is
            jitter that the absolute schedule absorbs.
        max_batch_s: when the loop is late, how long (loop seconds) the driver takes steps
            back to back before it yields to the loop (at least as long as the last
            flush took); every step's payloads are still delivered right after it, but
            flush hooks run once per batch, so a buffering consumer writes once per batch.

    Use ``async with EngineDriver(engine) as driver:`` or :meth:`start` / :meth:`aclose`;
    :meth:`submit` starts it on first use too.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        time_scale: float = 1.0,
        tokens_per_chunk: int = 1,
        model: str | None = None,
        keep_records: int = 1000,
        resync_s: float = 0.002,
        max_batch_s: float = 0.01,
    ) -> None:
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise ValueError(f"time_scale must be a finite number > 0, got {time_scale!r}")
        check_count(tokens_per_chunk, "tokens_per_chunk")
        check_count(keep_records, "keep_records", 0)
        if resync_s < 0:
            raise ValueError(f"resync_s must be ≥ 0, got {resync_s!r}")
        if max_batch_s < 0:
            raise ValueError(f"max_batch_s must be ≥ 0, got {max_batch_s!r}")
        self.engine = engine
        self.time_scale = float(time_scale)
        self.tokens_per_chunk = tokens_per_chunk
        self.model = model or engine.profile.model
        self.keep_records = keep_records
        self.resync_s = resync_s
        self.max_batch_s = max_batch_s
        self._requests: dict[int, SimRequest] = {}
        self._retired = RecordArchive(keep_records)
        self._finish_hooks: list[Callable[[RequestRecord], None]] = []
        self._flush_hooks: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._origin = 0.0
        self._closed = False
        self._steps = 0
        self._late_steps = 0
        self._resyncs = 0
        self._lag = 0.0
        self._max_late = 0.0
        self._flushes = 0
        self._submitted = 0
        self._cancelled = 0

    # --- Lifecycle ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called (no request is taken after it)."""
        return self._closed

    def start(self) -> None:
        """Start the step loop on the running event loop (no-op if running there).

        A driver is bound to the loop its step loop runs on. Once that loop has ended
        (``asyncio.run`` and ``run_virtual`` cancel the step loop and close the loop), the
        driver starts again on the next running loop, its engine clock anchored anew to
        that loop's time; requests left over from the old loop are aborted.

        Raises:
            ConfigError: the step loop still runs on another event loop (one driver
                serves one loop at a time).
            DriverFailed: the step loop failed (the error was logged on
                ``agentflow.sim``).
            RuntimeError: the driver was closed, or no event loop is running.
        """
        if self._closed:
            raise RuntimeError("this EngineDriver was closed")
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None:
            bound = task.get_loop()
            if not task.done():
                if bound is loop:
                    return
                if not bound.is_closed():
                    raise ConfigError(
                        "this EngineDriver's step loop runs on another event loop: a driver "
                        "(and its SimTransport) is bound to the loop it started on until that "
                        "loop is closed; use one driver per event loop"
                    )
            elif not task.cancelled() and (exc := task.exception()) is not None:
                raise DriverFailed(f"the simulator's step loop failed: {exc!r} (see the log)")
            self._abandon("the simulator's event loop ended")
        self._loop = loop
        self._wake = asyncio.Event()
        self._origin = loop.time() - self.engine.now * self.time_scale
        self._task = loop.create_task(self._run(), name="agentflow-sim-driver")

    async def aclose(self) -> None:
        """Stop the step loop; requests still running are aborted (``on_abort``)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            bound = task.get_loop()
            if bound is asyncio.get_running_loop():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            elif not bound.is_closed():
                bound.call_soon_threadsafe(task.cancel)
        self._abandon("the simulator stopped")

    def _abandon(self, reason: str) -> None:
        """Abort the requests still running (their consumers get ``on_abort(reason)``)."""
        for rid, req in list(self._requests.items()):
            self.engine.abort(rid)
            del self._requests[rid]
            self._retire(rid)
            try:
                req.consumer.on_abort(reason)
            except Exception:
                _log.exception("a stream consumer failed in on_abort")

    async def __aenter__(self) -> EngineDriver:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def running(self) -> bool:
        """Whether the step loop is running."""
        return self._task is not None and not self._task.done()

    # --- Clock -------------------------------------------------------------------------

    def engine_time(self) -> float:
        """The current loop time on the engine clock (seconds)."""
        loop = self._loop or asyncio.get_running_loop()
        return (loop.time() - self._origin) / self.time_scale

    def loop_time_of(self, engine_s: float) -> float:
        """The loop time of an engine-clock time."""
        return self._origin + engine_s * self.time_scale

    # --- Requests ----------------------------------------------------------------------

    def submit(
        self,
        body: Mapping[str, Any] | ChatParams,
        consumer: StreamConsumer,
        *,
        arrival: float | None = None,
        session_id: str | None = None,
    ) -> SimRequest:
        """Queue one chat-completions request; its payloads go to ``consumer``.

        Args:
            body: the JSON body of ``POST /v1/chat/completions`` (or parsed params).
            consumer: receives the payloads after each step (see :class:`StreamConsumer`).
            arrival: the loop time the request arrived at (default: now); the HTTP server
                passes the time its handler started, so that time spent reading and
                parsing the body counts, as it does in vLLM's TTFT.
            session_id: the conversation's id (the ``X-Session-ID`` header): its tool
                rounds are counted across its requests (:mod:`agentflow.sim.sessions`).

        Returns:
            the request's handle (``id``, live ``record``, ``cancel()``).

        Raises:
            RequestRejected: the body is invalid or does not fit the model's window —
                ``status`` and ``body()`` are vLLM's answer.
            ConfigError: the driver's step loop runs on another event loop.
            DriverFailed: the step loop failed.
            RuntimeError: the driver was closed.
        """
        params = body if isinstance(body, ChatParams) else parse_chat_body(body)
        self.start()
        engine = self.engine
        e_now = self.engine_time()
        if e_now > engine.now and not engine.has_work:
            engine.advance_to(e_now)
        arrival_s = e_now if arrival is None else (arrival - self._origin) / self.time_scale
        arrival_s = min(arrival_s, e_now, engine.now)
        rid = engine.add_chat(
            params.messages,
            tools=params.tools,
            tool_choice=params.tool_choice,
            parallel_tool_calls=params.parallel_tool_calls,
            max_tokens=params.max_tokens,
            stop=params.stop,
            salt="" if params.seed is None else str(params.seed),
            arrival_s=arrival_s,
            tool_rounds=params.tool_rounds,
            session_id=session_id,
        )
        req = SimRequest.open(self, rid, engine.record(rid), params, consumer)
        self._requests[rid] = req
        self._submitted += 1
        wake = self._wake
        if wake is not None and not wake.is_set():
            wake.set()
        return req

    def cancel(self, rid: int) -> bool:
        """Abort a request in the engine and stop its deliveries (client gone).

        Returns:
            whether it was still running (``False`` after its last payload).
        """
        req = self._requests.pop(rid, None)
        if req is None:
            return False
        self.engine.abort(rid)
        self._cancelled += 1
        self._retire(rid)
        return True

    def get(self, rid: int) -> SimRequest | None:
        """The handle of a request that has not ended yet."""
        return self._requests.get(rid)

    def record(self, request_id: int | str) -> RequestRecord | None:
        """The ground-truth record of a request (live or among the last ``keep_records``).

        Args:
            request_id: the engine id, or the response id ``chatcmpl-<n>``.
        """
        rid = parse_request_id(request_id)
        if rid is None:
            return None
        try:
            return self.engine.record(rid)
        except KeyError:
            return self._retired.get(rid)

    def add_finish_hook(self, hook: Callable[[RequestRecord], None]) -> None:
        """Call ``hook(record)`` for every request that finishes (cancelled ones excluded)."""
        self._finish_hooks.append(hook)

    def add_flush_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` whenever the driver is about to yield to the loop after deliveries.

        Consumers may buffer what :meth:`StreamConsumer.on_payloads` gives them and send
        it here: on schedule that is after every step; when the loop is late, after up to
        ``max_batch_s`` of back-to-back steps (so one write can carry several steps).
        """
        self._flush_hooks.append(hook)

    @property
    def active(self) -> int:
        """Requests submitted and not yet ended."""
        return len(self._requests)

    def stats(self) -> DriverStats:
        """The driver's counters."""
        return DriverStats(
            time_scale=self.time_scale,
            steps=self._steps,
            late_steps=self._late_steps,
            resyncs=self._resyncs,
            lag_s=self._lag,
            max_late_s=self._max_late,
            flushes=self._flushes,
            submitted=self._submitted,
            active=len(self._requests),
            cancelled=self._cancelled,
        )
