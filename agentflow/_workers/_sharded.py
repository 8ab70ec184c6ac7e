"""One sharded run on the parent (:class:`ShardedRun`): its state and the steps
:func:`~agentflow._workers._parent.run_sharded` takes — start the workers, wire them to
the lease broker, take in their messages, re-run a lost worker's sessions, end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentflow._event_bus import EventBus
from agentflow._events import FleetEndEvent, FleetStartEvent, SessionEndEvent
from agentflow._logging import get_logger
from agentflow._session import Session, SessionResult
from agentflow._workers._broker import Broker, WorkerHandle
from agentflow._workers._checks import check_picklable
from agentflow._workers._open_turns import OpenTurns
from agentflow._workers._rerun import MAX_RERUNS, Reruns
from agentflow._workers._results import fail_missing, merge_replicas, stop_workers
from agentflow._workers._watchdog import watchdog
from agentflow._workers._wire import decode, worker_config

if TYPE_CHECKING:
    from agentflow._fleet import Fleet, FleetResult
    from agentflow._workers._parent import Launcher
    from agentflow.store._durable import DurableRun

__all__ = ["MAX_RERUNS", "ShardedRun", "WorkerLostError"]

_log = get_logger("agentflow.workers")


class WorkerLostError(Exception):
    """What a launcher's ``start`` raises for a worker lost while it started (a Ray actor
    that died): its sessions are run again as a lost worker's are, not failed."""


class ShardedRun(Reruns):
    """A run's sessions on ``fleet.workers`` workers that ``launcher`` starts and reaches:
    what the parent keeps while it goes (the workers, each session's result and re-runs,
    the broker) and what it does on each worker's message and exit.

    Building it checks that everything pickles (a :class:`ConfigError` otherwise) and
    starts nothing; :func:`~agentflow._workers._parent.run_sharded` calls the steps.
    An attempt at a recorded run (``durable``) is part of the run: its start event counts
    the run's sessions, and ``finalize`` turns the attempt's result into the run's (the
    one its end event carries and :meth:`finish` returns)."""

    def __init__(
        self,
        fleet: Fleet,
        sessions: list[Session],
        bus: EventBus,
        launcher: Launcher,
        durable: DurableRun | None = None,
        finalize: Callable[[FleetResult], FleetResult] | None = None,
    ) -> None:
        assert fleet.workers is not None
        # No more workers than sessions (none for an empty run): each would start, import
        # agentflow and its sessions' tools, and end with nothing to run.
        n = self.n = min(fleet.workers, len(sessions))
        self.fleet, self.sessions, self.bus = fleet, sessions, bus
        self.launcher, self.durable, self.finalize = launcher, durable, finalize
        self.blobs = check_picklable(fleet, sessions)
        self.loop = asyncio.get_running_loop()
        self.workers: list[WorkerHandle] = []
        self.index = {s.session_id: k for k, s in enumerate(sessions)}
        self.results: list[SessionResult | None] = [None] * len(sessions)
        self.reruns = [0] * len(sessions)
        self.broker: Broker | None = None
        self.cancelling = False
        self.over = False  # the run has returned: what still arrives is not recorded
        self.starting: set[asyncio.Task[None]] = set()
        # Per worker, its last (in flight, queued): Fleet.in_flight and .queued sum them.
        self.live = [(0, 0)] * n
        # Per worker, the counts it last sent (cumulative: see WorkerRun.counts).
        self.counts: list[dict[str, Any]] = [{} for _ in range(n)]
        self.config = worker_config(fleet, bus, durable)
        self.recorder = durable.recorder if durable is not None else None
        #: Sessions whose end a worker recorded (its record written here): a worker that
        #: dies before its SessionEndEvent arrives must not have that end overwritten.
        self.recorded_ends: set[str] = set()
        self.start_ns = 0
        self.watch: asyncio.Task[None] | None = None
        # With tokens forwarded, what each session's worker streamed of its turn so far
        # as of its last batch (retracted if the worker is lost).
        self.open_turns = OpenTurns() if "token" in self.config["wanted"] else None

    # -- the steps ------------------------------------------------------------------------

    def open(self) -> None:
        """The run starts: its start event, the live counts on the fleet, the store's
        recorder told, the heartbeat watchdog."""
        fleet = self.fleet
        self.start_ns = fleet._clock()
        total = len(self.sessions if self.durable is None else self.durable.entries)
        self.bus.emit(FleetStartEvent(sessions=total, start_ns=self.start_ns))
        fleet._live = self.live
        if self.recorder is not None:
            # The workers' calibrators learn and record their state; this process's copies
            # do not, and must not overwrite theirs at the attempt's end.
            self.recorder.track_policies(())
        if fleet.heartbeat_timeout_s is not None:
            self.watch = self.loop.create_task(
                watchdog(self.workers, self.launcher, fleet.heartbeat_timeout_s)
            )

    def spawn_workers(self) -> None:
        """Deal the sessions round-robin, create a worker for each shard, then the broker
        that leases the fleet's limits to them."""
        n = self.n
        shards: list[list[int]] = [[] for _ in range(n)]
        for k in range(len(self.sessions)):
            shards[k % n].append(k)
        for i in range(n):
            self.spawn(shards[i])
        self.broker = Broker(self.fleet.limits, self.workers, self.live, self.fleet._carry)

    async def run_workers(self) -> None:
        """Start every worker, wait until each has ended (replacements included)."""
        broker = self.broker
        assert broker is not None
        # Each starts with its fair share of the slots (a large start blocks until the
        # worker has imported: the workers start side by side).
        await asyncio.gather(*(self.begin(w, broker.held[w.index]) for w in list(self.workers)))
        while True:
            waits = [w.done for w in self.workers if w.done is not None and not w.done.done()]
            if not waits:
                break
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)

    async def cancel(self) -> None:
        """The run was cancelled: the workers' runs are cancelled and given
        ``stop_timeout_s`` for their partial results; the sessions left end cancelled."""
        self.cancelling = True
        await stop_workers(self.workers, self.fleet.stop_timeout_s)
        for w in self.workers:
            if w.done is not None and not w.done.done():
                # Not stopped in time (a blocked loop; or its last messages are not read
                # yet): killed, not waited for again, and its sessions end below, once —
                # a result of its that is read later is dropped (see on_message).
                w.cut = True
                if w.alive:
                    self.launcher.kill(w)
        fail_missing(
            self.sessions,
            self.results,
            self.workers,
            self.bus,
            "cancelled",
            self.launcher,
            self.recorder,
            self.recorded_ends,
            self.open_turns,
        )

    def finish(self) -> FleetResult:
        """The run's result: the sessions no worker finished fail, the workers' counts are
        merged (each one's last: a lost worker's as of its last message), the fleet's end
        event is sent."""
        from agentflow._fleet import FleetResult, ReplicaStats

        fleet, bus, broker = self.fleet, self.bus, self.broker
        assert broker is not None
        fail_missing(
            self.sessions,
            self.results,
            self.workers,
            bus,
            "error",
            self.launcher,
            self.recorder,
            self.recorded_ends,
            self.open_turns,
        )
        final = [r for r in self.results if r is not None]
        stats = self.counts
        assert len(final) == len(self.sessions)
        replicas = merge_replicas(
            [s.get("replicas", []) for s in stats], ReplicaStats, fleet.limits.max_in_flight
        )
        peak = sum(s.get("peak_in_flight", 0) for s in stats)
        if fleet.limits.max_in_flight is not None:
            peak = min(peak, fleet.limits.max_in_flight)
        result = FleetResult(
            sessions=final,
            wall_s=(fleet._clock() - self.start_ns) / 1e9,
            peak_in_flight=peak,
            callback_errors=bus.callback_errors,
            callback_errors_dropped=bus.callback_errors_dropped,
            retries=sum(s.get("retries", 0) for s in stats),
            replicas=replicas,
            start_ns=self.start_ns,
        )
        # The limits' cost: messages between broker and workers (benchmarks read it).
        fleet._lease_messages = broker.messages
        _log.info("workers.end", workers=len(self.workers), lease_messages=broker.messages)
        if self.finalize is not None:
            result = self.finalize(result)
        bus.emit(FleetEndEvent(result=result))
        return result

    async def close(self, *, cancelled: bool = False) -> None:
        """Whatever ended the run: nothing more is started or re-run, the broker and the
        bus are closed (``cancelled``: with no drain, see :meth:`EventBus.aclose`), every
        worker is reaped."""
        self.cancelling = True
        self.fleet._live = None
        if self.watch is not None:
            self.watch.cancel()
        for t in list(self.starting):
            t.cancel()
        if self.broker is not None:
            await self.broker.aclose()
        # Async callbacks and stream() queues have had every event (a cancelled run's:
        # those they could take before it was).
        await self.bus.aclose(cancelled=cancelled)
        try:
            await self.launcher.reap(self.workers, self.fleet.stop_timeout_s)
        finally:
            self.over = True

    # -- starting a worker ----------------------------------------------------------------

    def spawn(self, shard: list[int]) -> WorkerHandle:
        """Create a worker for the sessions ``shard``; one created once the broker is
        there (a replacement) is also started here."""
        w = self.launcher.launch(len(self.workers), shard)
        w.done = self.loop.create_future()
        self.workers.append(w)
        if len(self.live) < len(self.workers):
            self.live.append((0, 0))
            self.counts.append({})
        broker = self.broker
        if broker is not None and len(broker.held) < len(self.workers):
            broker.add_worker()
        if broker is not None:  # a replacement: started here; the first ones below
            self._background(self.begin(w, 0))
        return w

    async def begin(self, w: WorkerHandle, initial_slots: int) -> None:
        """Send ``w`` its configuration and sessions, then listen to it. A worker whose
        start fails (or times out) is killed first; then a lost one's sessions may run
        again (:class:`WorkerLostError`), another's fail with the reason."""
        assert self.broker is not None
        msg_config = {
            **self.config,
            "slot_batch": self.broker.slot_batch,
            "initial_slots": initial_slots,
        }
        try:
            await self.launcher.start(w, msg_config, [self.blobs[k] for k in w.sessions])
        except Exception as exc:
            # Stopped for good before its sessions end or move: one that only started late
            # (its start timed out) would otherwise run them anyway, on slots given back.
            self.launcher.kill(w)
            if isinstance(exc, WorkerLostError):  # lost: its sessions may run again
                w.lost_why = f"{type(exc).__name__}: {exc}"
                self.on_exit(w, True)
            else:  # it could not start: its sessions fail with the reason
                w.crash = w.crash or f"{type(exc).__name__}: {exc}"
                self.on_exit(w, False)
            return
        if w.opened is None:  # (a worker process's counts from before its start send)
            w.opened = self.loop.time()
        self.launcher.listen(w, self.on_message, self.on_exit)

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task the run's end cancels if it is still going."""
        task = self.loop.create_task(coro)
        self.starting.add(task)
        task.add_done_callback(self.starting.discard)

    # -- a worker's messages --------------------------------------------------------------

    def on_message(self, w: WorkerHandle, msg: Any) -> None:
        """One message from ``w`` (on the run's loop): events for the bus, records for the
        store, lease requests and returns for the broker, its status, its end."""
        w.heard = self.loop.time()
        broker = self.broker
        kind = msg[0]
        if (w.cut or self.over) and kind != "records":
            # Given up by a cancel, or the run has returned: its sessions ended already
            # (each has one session_end, and its result does not change after the run).
            if kind == "events":
                _log.warning("workers.late_events", worker=w.index)
            return
        if kind == "events":
            self.counts[w.index] = msg[2]
            if msg[3] is not None and self.open_turns is not None:
                self.open_turns.update(msg[3])  # (per batch: nothing per token here)
            for event in decode(msg[1]):
                if isinstance(event, SessionEndEvent):
                    k = self.index.get(event.session_id)
                    if k is not None:  # the caller's Session ends as if it ran here
                        if self.results[k] is not None:  # it ended already: once only
                            _log.warning("workers.second_end", session=event.session_id)
                            continue
                        self.results[k] = s = event.result
                        session = self.sessions[k]
                        session.result, session.messages, session.turns = s, s.messages, s.turns
                        if self.open_turns is not None:  # (nothing of it to retract now)
                            self.open_turns.forget(event.session_id)
                self.bus.emit(event)
        elif kind == "records":
            recorder = self.recorder
            if recorder is None or self.over:  # too late: the attempt's end is recorded
                _log.warning("workers.late_records", worker=w.index, records=len(msg[1]))
                return
            from agentflow.store._records import SessionEnded, TurnFinished

            write = recorder.store.write
            for record in msg[1]:
                write(record)
                if isinstance(record, TurnFinished):
                    recorder.retries += record.failed_attempts
                elif isinstance(record, SessionEnded):
                    self.recorded_ends.add(record.session_id)
                    if recorder.on_session_end is not None:
                        recorder.on_session_end(record.session_id)
        elif kind == "want_slots":
            assert broker is not None
            broker.want_slots(w.index, msg[1])
        elif kind == "return_slots":
            assert broker is not None
            broker.returned(w.index, msg[1])
        elif kind == "return_spare":
            assert broker is not None
            broker.returned(w.index, msg[1], owed=False)
        elif kind == "crash":
            w.crash = msg[1]
        elif kind == "status":
            self.live[w.index] = (msg[1], msg[2])
            self.counts[w.index] = msg[3]
            if broker is not None:
                broker.idle_check(w.index)
        elif kind == "want_rates":
            assert broker is not None
            broker.want_rates(w.index, msg[1], msg[2])
        elif kind == "done":
            # Its run is over: the slots it still holds go back (it sends nothing more).
            if broker is not None:
                broker.worker_gone(w.index)
            w.alive = False
            self.live[w.index] = (0, 0)
            if msg[1]:  # its final counts ({}: its run never started)
                self.counts[w.index] = msg[1]
            if w.done is not None and not w.done.done():
                w.done.set_result(msg[1])

    def on_exit(self, w: WorkerHandle, lost: bool) -> None:
        """``w`` is gone (``lost``: it died, not ended): its slots go back, and a lost
        worker's unfinished sessions may run again (:meth:`rerun`)."""
        if w.done is not None and w.done.done():
            return  # it ended its run and said so
        w.alive = False
        self.live[w.index] = (0, 0)
        if self.broker is not None:
            self.broker.worker_gone(w.index)
        if lost and self.rerun(w):
            return  # its done resolves once their new worker is registered
        if w.done is not None and not w.done.done():
            w.done.set_result({})
