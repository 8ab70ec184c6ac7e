"""The parent's side of ``Fleet(workers=N)``: checks, start, results, stop."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from agentflow._errors import ConfigError, WorkerError
from agentflow._events import (
    ErrorEvent,
    EventBus,
    FleetEndEvent,
    FleetStartEvent,
    SessionEndEvent,
)
from agentflow._logging import get_logger
from agentflow._session import Session, SessionResult
from agentflow._workers._broker import Broker, WorkerHandle
from agentflow._workers._processes import ProcessLauncher
from agentflow._workers._wire import decode
from agentflow.sched import Limits

if TYPE_CHECKING:
    from agentflow._fleet import Fleet, FleetResult
    from agentflow.store._durable import DurableRun

__all__ = ["Launcher", "check_picklable", "run_in_workers", "run_sharded"]

_log = get_logger("agentflow.workers")


#: Every event type a worker may forward (the fleet's own start/end come from the parent).
_FORWARDABLE = (
    "token",
    "tool_call",
    "tool_result",
    "turn_end",
    "session_end",
    "attempt_discarded",
    "retry",
    "context_trimmed",
    "compaction",
    "budget",
    "cache_buster",
    "error",
)


def check_picklable(fleet: Fleet, sessions: list[Session]) -> list[bytes]:
    """Each session pickled; a :class:`ConfigError` naming the agent or tool (or the
    transport) that does not pickle."""
    for replica in fleet.replicas:
        if type(replica.transport).__module__.startswith("agentflow.embedded"):
            raise ConfigError(
                f"Fleet(workers={fleet.workers}) cannot share the in-process "
                f"{type(replica.transport).__name__}: each worker would get its own copy of "
                "the simulator (no shared server, no shared limits); run `agentflow sim` "
                "(or SimServer) and use HTTPTransport"
            )
        if replica.limits is not None and replica.limits != Limits():
            raise ConfigError(
                f"Fleet(workers={fleet.workers}): per-replica limits (replica "
                f"{replica.transport.endpoint!r}) are not shared across workers yet; "
                "use the fleet's limits"
            )
        try:
            pickle.dumps(replica)
        except Exception as exc:
            raise ConfigError(
                f"Fleet(workers={fleet.workers}) needs transports that pickle (each worker "
                f"builds its own): {type(replica.transport).__name__} for "
                f"{replica.transport.endpoint!r} does not ({exc}); the in-process "
                "SimTransport cannot be shared — run `agentflow sim` and use HTTPTransport"
            ) from exc
    if fleet._clock is not time.perf_counter_ns or fleet._sleep is not asyncio.sleep:
        raise ConfigError(
            f"Fleet(workers={fleet.workers}) runs on each worker's own clock: a custom "
            "clock= or sleep= (virtual time, a test's fake) cannot cross processes"
        )
    for what in ("policy", "router", "retry"):
        try:
            pickle.dumps(getattr(fleet, what))
        except Exception as exc:
            raise ConfigError(
                f"Fleet(workers={fleet.workers}): the fleet's {what} "
                f"({type(getattr(fleet, what)).__name__}) does not pickle: {exc}"
            ) from exc
    checked: set[int] = set()
    out = []
    for s in sessions:
        agent = s.agent
        if id(agent) not in checked:
            checked.add(id(agent))
            _check_agent(agent)
        try:
            out.append(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:
            raise ConfigError(
                f"session {s.session_id!r} (agent {agent.name!r}) does not pickle for "
                f"Fleet(workers=...): {exc}"
            ) from exc
    return out


def _check_agent(agent: Any) -> None:
    try:
        pickle.dumps(agent)
        return
    except Exception as exc:
        first = exc
    for tool in getattr(agent, "tools", ()):
        try:
            pickle.dumps(tool)
        except Exception as exc:
            name = getattr(tool, "name", None) or getattr(tool, "__qualname__", repr(tool))
            raise ConfigError(
                f"agent {agent.name!r}: tool {name!r} does not pickle, so Fleet(workers=...) "
                "cannot send it to a worker; tools must be module-level functions "
                f"(no lambdas, closures or bound state that does not pickle): {exc}"
            ) from exc
    raise ConfigError(
        f"agent {agent.name!r} does not pickle, so Fleet(workers=...) cannot send it "
        f"to a worker: {first}"
    ) from first


class Launcher(Protocol):
    """How a sharded run reaches its workers: the one part that differs between worker
    processes (pipes) and Ray actors (method calls). The rest of the run — the checks,
    the broker, the event merge, the results — is :func:`run_sharded`'s, for both."""

    #: Whether a worker lost mid-run (not one that failed on its own) has its
    #: unfinished sessions run again on a new worker (from the start, or with a store
    #: from their last recorded turn).
    rerun_lost: bool

    def launch(self, index: int, sessions: list[int]) -> WorkerHandle:
        """Create worker ``index`` for these sessions (it may still be starting)."""
        ...

    async def start(self, w: WorkerHandle, config: dict[str, Any], blobs: list[bytes]) -> None:
        """Hand the worker its configuration and sessions."""
        ...

    def listen(
        self,
        w: WorkerHandle,
        on_message: Callable[[WorkerHandle, Any], None],
        on_exit: Callable[[WorkerHandle, bool], None],
    ) -> None:
        """Deliver the worker's messages to ``on_message`` on the run's loop, then call
        ``on_exit(w, lost)`` once when it is gone (``lost``: it died, not ended)."""
        ...

    def ended(self, w: WorkerHandle) -> tuple[str, int | None]:
        """How the worker ended, for a :class:`WorkerError`: its description ("worker
        0 (pid 12) ended (exit code -9)") and its exit code, if it has one."""
        ...

    async def reap(self, workers: list[WorkerHandle], timeout_s: float) -> None:
        """Every worker ends (asked, then forced after ``timeout_s``)."""
        ...

    def kill(self, w: WorkerHandle) -> None:
        """Stop ``w`` for good, at once (it is hung); its listener then finds it gone
        and calls ``on_exit(w, True)``. Never raises."""
        ...


#: With the heartbeat on: how long a started worker may take to send its first message
#: (it imports its sessions' tools meanwhile) before it is declared hung.
START_TIMEOUT_S = 300.0

#: How many times a session whose worker was lost is run again before it fails.
MAX_RERUNS = 2


async def run_in_workers(
    fleet: Fleet, sessions: list[Session], bus: EventBus, durable: DurableRun | None = None
) -> FleetResult:
    """Run ``sessions`` on ``fleet.workers`` worker processes (or Ray actors, with
    ``backend="ray"``), recording them in ``durable``'s store if given; see the module
    docstring."""
    if fleet.backend == "ray":
        from agentflow._workers._ray import RayLauncher

        return await run_sharded(fleet, sessions, bus, RayLauncher(), durable)
    return await run_sharded(fleet, sessions, bus, ProcessLauncher(), durable)


async def run_sharded(
    fleet: Fleet,
    sessions: list[Session],
    bus: EventBus,
    launcher: Launcher,
    durable: DurableRun | None = None,
) -> FleetResult:
    """Run ``sessions`` on ``fleet.workers`` workers that ``launcher`` starts and reaches.

    With ``durable`` (the fleet has a store), this process owns the store: each worker
    sends what its sessions record (the same records as one process builds) over its
    channel, and they are written here; a worker lost mid-run (a killed process or
    actor, not one that crashed on its own) is replaced, and its sessions continue on
    the new one from their last recorded turn."""
    from agentflow._fleet import FleetResult, ReplicaStats
    from agentflow.store._records import SessionEnded, TurnFinished

    n = fleet.workers
    assert n is not None
    blobs = check_picklable(fleet, sessions)
    wanted = {t for t in _FORWARDABLE if t != "token" and bus.wants(t)}
    if bus.wants_tokens:
        wanted.add("token")
    wanted.add("session_end")  # the results travel in it
    loop = asyncio.get_running_loop()
    clock = fleet._clock
    start = clock()
    bus.emit(FleetStartEvent(sessions=len(sessions), start_ns=start))
    workers: list[WorkerHandle] = []
    shards: list[list[int]] = [[] for _ in range(n)]
    for k in range(len(sessions)):
        shards[k % n].append(k)
    index = {s.session_id: k for k, s in enumerate(sessions)}
    results: list[SessionResult | None] = [None] * len(sessions)
    reruns = [0] * len(sessions)
    broker: Broker | None = None
    cancelling = False
    over = False  # the run has returned: what still arrives is not recorded
    starting: set[asyncio.Task[None]] = set()
    # Per worker, its last (in flight, queued): Fleet.in_flight and .queued sum them.
    live = [(0, 0)] * n
    fleet._live = live
    config: dict[str, Any] = {
        "replicas": fleet.replicas,
        "policy": fleet.policy,
        "retry": fleet.retry,
        "router": fleet.router,
        "prefix_warmup": fleet.prefix_warmup,
        "max_tool_concurrency": fleet.max_tool_concurrency,
        "freeze_gc": fleet.freeze_gc,
        "wanted": wanted,
        "slots": fleet.limits.max_in_flight is not None,
        "slot_batch": 1,
        "initial_slots": 0,
        "rates": fleet.limits.rpm is not None or fleet.limits.tpm is not None,
        "rpm": fleet.limits.rpm is not None,
        "tpm": fleet.limits.tpm is not None,
        "record": None if durable is None else (durable.run_id, durable.attempt),
    }
    recorder = durable.recorder if durable is not None else None
    if recorder is not None:
        # The workers' calibrators learn and record their state; this process's copies
        # do not, and must not overwrite theirs at the attempt's end.
        recorder.track_policies(())

    def on_message(w: WorkerHandle, msg: Any) -> None:
        w.heard = loop.time()
        kind = msg[0]
        if kind == "events":
            for event in decode(msg[1]):
                if isinstance(event, SessionEndEvent):
                    k = index.get(event.session_id)
                    if k is not None:  # the caller's Session ends as if it ran here
                        results[k] = s = event.result
                        session = sessions[k]
                        session.result, session.messages, session.turns = s, s.messages, s.turns
                bus.emit(event)
        elif kind == "records":
            if recorder is None or over:  # too late: the attempt's end is recorded
                _log.warning("workers.late_records", worker=w.index, records=len(msg[1]))
                return
            write = recorder.store.write
            for record in msg[1]:
                write(record)
                if isinstance(record, TurnFinished):
                    recorder.retries += record.failed_attempts
                elif isinstance(record, SessionEnded) and recorder.on_session_end is not None:
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
            live[w.index] = (msg[1], msg[2])
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
            live[w.index] = (0, 0)
            if w.done is not None and not w.done.done():
                w.done.set_result(msg[1])

    def on_exit(w: WorkerHandle, lost: bool) -> None:
        if w.done is not None and w.done.done():
            return  # it ended its run and said so
        w.alive = False
        live[w.index] = (0, 0)
        if broker is not None:
            broker.worker_gone(w.index)
        # Lost (not ended on its own): re-run on Ray; with a store, on any launcher
        # (the sessions continue from their recorded turns, not from their start).
        rerun = launcher.rerun_lost or (durable is not None and not w.crash)
        if lost and rerun and not cancelling:
            again = [k for k in w.sessions if results[k] is None and reruns[k] < MAX_RERUNS]
            if again:
                # Registered before this one's done resolves, so the run waits for it too.
                what, _ = launcher.ended(w)
                _log.warning(
                    "workers.rerun",
                    lost=what,
                    sessions=[sessions[k].session_id for k in again],
                )
                moved = set(again)
                w.sessions = [k for k in w.sessions if k not in moved]
                for k in again:
                    reruns[k] += 1
                if durable is not None:  # from where the store says they stopped
                    task = loop.create_task(from_store(w, again))
                    starting.add(task)
                    task.add_done_callback(starting.discard)
                    return  # its done resolves once their new worker is registered
                spawn(again)
        if w.done is not None and not w.done.done():
            w.done.set_result({})

    async def from_store(w: WorkerHandle, again: list[int]) -> None:
        """Rebuild ``again`` (lost with ``w``) from the store, then run them on a new
        worker; one whose end was recorded ends here. Should the store fail, they
        fail with ``w``'s WorkerError."""
        assert durable is not None
        try:
            try:
                entries = await durable.reload([sessions[k] for k in again])
                rerun: list[int] = []
                for k, entry in zip(again, entries, strict=True):
                    if isinstance(entry, Session):
                        blobs[k] = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
                        rerun.append(k)
                    else:
                        finish_here(k, entry)
            except Exception as exc:
                _log.error("workers.rerun_from_store_failed", error=repr(exc))
                w.crash = w.crash or f"its sessions could not be read back from the store: {exc!r}"
                w.sessions.extend(again)
                return
            if rerun:
                spawn(rerun)
        finally:
            if w.done is not None and not w.done.done():
                w.done.set_result({})

    def finish_here(k: int, result: SessionResult) -> None:
        results[k] = result
        s = sessions[k]
        s.result, s.messages, s.turns = result, result.messages, result.turns
        bus.emit(SessionEndEvent(agent=s.agent.name, session_id=s.session_id, result=result))

    def spawn(shard: list[int]) -> WorkerHandle:
        w = launcher.launch(len(workers), shard)
        w.done = loop.create_future()
        workers.append(w)
        if len(live) < len(workers):
            live.append((0, 0))
        if broker is not None and len(broker.held) < len(workers):
            broker.add_worker()
        if broker is not None:  # a replacement: started here; the first ones below
            task = loop.create_task(begin(w, 0))
            starting.add(task)
            task.add_done_callback(starting.discard)
        return w

    async def begin(w: WorkerHandle, initial_slots: int) -> None:
        assert broker is not None
        msg_config = {**config, "slot_batch": broker.slot_batch, "initial_slots": initial_slots}
        try:
            await launcher.start(w, msg_config, [blobs[k] for k in w.sessions])
        except Exception as exc:  # it could not start: its sessions fail with the reason
            w.crash = w.crash or f"{type(exc).__name__}: {exc}"
            on_exit(w, False)
            return
        w.opened = loop.time()
        launcher.listen(w, on_message, on_exit)

    async def watchdog(timeout_s: float) -> None:
        """Kill a worker that has sent nothing for ``timeout_s`` (its loop is blocked:
        a running worker reports every 0.25 s); its listener then finds it gone, and
        it is handled as a worker that died. While it starts (nothing heard yet) the
        bound is :data:`START_TIMEOUT_S` from when it was sent its sessions instead;
        none once it ended (``done``)."""
        every = min(1.0, timeout_s / 4)
        last = loop.time()
        while True:
            await asyncio.sleep(every)
            await asyncio.sleep(0)  # messages already handed to the loop count first
            now = loop.time()
            if now - last > every + timeout_s / 2:
                # This loop itself was held up (a slow callback here): what the workers
                # sent meanwhile may not be read yet, so none is judged on it.
                for w in workers:
                    if w.heard is not None:
                        w.heard = now
                    elif w.opened is not None:
                        w.opened = now
            last = now
            for w in list(workers):
                if w.hung or not w.alive or w.done is None or w.done.done():
                    continue
                if w.heard is not None:
                    if now - w.heard <= timeout_s:
                        continue
                    w.hung = (
                        f"no heartbeat for {timeout_s:g} s (its event loop was blocked: a "
                        "call that does not return, or a deadlock), so it was killed"
                    )
                else:  # starting: bounded by the start-up's own, longer, timeout
                    bound = max(START_TIMEOUT_S, timeout_s)
                    if w.opened is None or now - w.opened <= bound:
                        continue
                    w.hung = (
                        f"nothing heard from it within {bound:g} s of its start (hung while "
                        "it loaded its sessions or tools), so it was killed"
                    )
                _log.error("workers.hung", worker=w.index, why=w.hung)
                launcher.kill(w)

    watch = (
        None
        if fleet.heartbeat_timeout_s is None
        else loop.create_task(watchdog(fleet.heartbeat_timeout_s))
    )

    try:
        for i in range(n):
            spawn(shards[i])
        broker = Broker(fleet.limits, workers, live)
        # Each starts with its fair share of the slots (a large start blocks until the
        # worker has imported: the workers start side by side).
        try:
            await asyncio.gather(*(begin(w, broker.held[w.index]) for w in list(workers)))
            while True:
                waits = [w.done for w in workers if w.done is not None and not w.done.done()]
                if not waits:
                    break
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            stats = [w.done.result() for w in workers if w.done is not None]
        except asyncio.CancelledError:
            cancelling = True
            await _stop(workers, fleet.stop_timeout_s)
            _fail_missing(sessions, results, workers, bus, "cancelled", launcher)
            raise
        _fail_missing(sessions, results, workers, bus, "error", launcher)
        final = [r for r in results if r is not None]
        assert len(final) == len(sessions)
        replicas = _merge_replicas([s.get("replicas", []) for s in stats], ReplicaStats)
        peak = sum(s.get("peak_in_flight", 0) for s in stats)
        if fleet.limits.max_in_flight is not None:
            peak = min(peak, fleet.limits.max_in_flight)
        result = FleetResult(
            sessions=final,
            wall_s=(clock() - start) * 1e-9,
            peak_in_flight=peak,
            callback_errors=bus.callback_errors,
            retries=sum(s.get("retries", 0) for s in stats),
            replicas=replicas,
        )
        # The limits' cost: messages between broker and workers (benchmarks read it).
        fleet._lease_messages = broker.messages
        _log.info("workers.end", workers=len(workers), lease_messages=broker.messages)
        bus.emit(FleetEndEvent(result=result))
        return result
    finally:
        cancelling = True
        fleet._live = None
        if watch is not None:
            watch.cancel()
        for t in list(starting):
            t.cancel()
        if broker is not None:
            await broker.aclose()
        await bus.aclose()  # async callbacks and stream() queues have had every event
        try:
            await launcher.reap(workers, fleet.stop_timeout_s)
        finally:
            over = True


def _merge_replicas(per_worker: list[list[Any]], cls: Any) -> list[Any]:
    merged: dict[str, Any] = {}
    for stats in per_worker:
        for r in stats:
            m = merged.get(r.name)
            merged[r.name] = (
                r
                if m is None
                else cls(
                    name=r.name,
                    served=m.served + r.served,
                    failures=m.failures + r.failures,
                    peak_in_flight=m.peak_in_flight + r.peak_in_flight,
                    breaker_opened=m.breaker_opened + r.breaker_opened,
                    breaker_held=m.breaker_held + r.breaker_held,
                )
            )
    return list(merged.values())


def _fail_missing(
    sessions: list[Session],
    results: list[SessionResult | None],
    workers: list[WorkerHandle],
    bus: EventBus,
    status: str,
    launcher: Launcher,
) -> None:
    """Sessions with no result (their worker died, or the run was cancelled first)."""
    for w in workers:
        for k in w.sessions:
            if results[k] is not None:
                continue
            s = sessions[k]
            if status == "cancelled":
                error: BaseException = asyncio.CancelledError()
            else:
                what, code = launcher.ended(w)
                reason = w.crash or w.hung
                why = f": {reason}" if reason else ""
                error = WorkerError(
                    f"{what} before session {s.session_id!r} did{why}",
                    worker=w.index,
                    exitcode=code,
                )
            result = SessionResult(
                session_id=s.session_id,
                agent=s.agent.name,
                status="cancelled" if status == "cancelled" else "error",
                final_output=None,
                messages=list(s.messages),
                turns=list(s.turns),
                error=error,
                metadata=s.metadata,
            )
            results[k] = s.result = result
            if status != "cancelled":
                bus.emit(
                    ErrorEvent(
                        agent=s.agent.name,
                        session_id=s.session_id,
                        turn=None,
                        where="session",
                        error=error,
                    )
                )
            bus.emit(SessionEndEvent(agent=s.agent.name, session_id=s.session_id, result=result))


async def _stop(workers: list[WorkerHandle], timeout_s: float) -> None:
    """Cancel every worker's run and wait (at most ``timeout_s``) for its partial results."""
    for w in workers:
        if w.alive:
            with contextlib.suppress(OSError, ValueError):
                w.send(("cancel",))
    # Only a worker that is heard can say it stopped (one cancelled while it started
    # is not: its sessions end cancelled here).
    waits = [
        w.done
        for w in workers
        if w.done is not None
        and not w.done.done()
        and (w.reader is not None or w.listener is not None)
    ]
    if waits:
        await asyncio.wait(waits, timeout=timeout_s)
