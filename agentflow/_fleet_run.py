"""One process's run of a fleet's sessions: its scheduler and turn runner, a task per
session (or, when no session runs anything before its first turn, each queued as that
turn's ticket: ``_fleet_queued.py``), the events at its start and end, and the
:class:`FleetResult`.

``_fleet_launch.py`` chooses the path a :class:`~agentflow.Fleet`'s run takes — this
process, its workers (``agentflow._workers``, each worker running this), a recorded run —
and calls :func:`run_in_process` inside ``frozen_gc``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentflow._events import FleetEndEvent, FleetStartEvent
from agentflow._fleet_queued import _Queued, _Starter, if_never_ran
from agentflow._fleet_types import FleetResult, ReplicaStats
from agentflow._gcfreeze import Refreezer
from agentflow._logging import get_logger

if TYPE_CHECKING:
    from agentflow._event_bus import EventBus
    from agentflow._fleet import Fleet
    from agentflow._session import Session
    from agentflow._session_types import SessionResult, TurnLog
    from agentflow.store._claims import SessionGate

__all__ = ["run_in_process"]

_log = get_logger("agentflow.fleet")


async def run_in_process(
    fleet: Fleet,
    sessions: list[Session],
    bus: EventBus,
    turn_log: TurnLog | None,
    gate: SessionGate | None = None,
    *,
    run_sessions: int | None = None,
    finalize: Callable[[FleetResult], FleetResult] | None = None,
) -> FleetResult:
    """Run ``sessions`` in this process, each to its end, and return their results
    (``turn_log``, ``gate``: a recorded run's recorder and session leases).

    An attempt at a recorded run is part of the run: ``run_sessions`` is how many
    sessions the whole run has (its ``FleetStartEvent``'s count; default: these), and
    ``finalize`` turns the attempt's result into the run's — the result the
    ``FleetEndEvent`` carries and this returns."""
    scheduler = fleet._new_scheduler()
    runner = fleet._new_runner(scheduler)
    probe = fleet._probe_slots(len(sessions))
    tool_limit = asyncio.Semaphore(fleet.max_tool_concurrency)
    fleet._scheduler = scheduler
    start = fleet._clock()
    total = len(sessions) if run_sessions is None else run_sessions
    bus.emit(FleetStartEvent(sessions=total, start_ns=start))
    _log.info(
        "fleet.start",
        sessions=len(sessions),
        max_concurrency=fleet.max_concurrency,
        replicas=len(fleet.replicas),
    )
    refreezer = Refreezer()

    # A resumed session's recorded endpoint names its replica when only one has it.
    endpoints = Counter(r.transport.endpoint for r in scheduler.replicas)
    homes = {
        r.transport.endpoint: r for r in scheduler.replicas if endpoints[r.transport.endpoint] == 1
    }

    def run_one(s: Session) -> Coroutine[Any, Any, SessionResult]:
        home = homes.get(s.home) if s.home is not None else None
        if home is not None:  # resumed: back to the replica its turns went to
            scheduler.router.restore(s.session_id, home)
        return s.run(
            _runner=runner,
            _bus=bus,
            _tool_limit=tool_limit,
            clock=fleet._clock,
            _turn_log=turn_log,
        )

    tasks: list[asyncio.Task[SessionResult]] | None = None
    cancelled = False
    result: FleetResult | None = None
    try:
        async with asyncio.TaskGroup() as tg:
            if gate is None and all(s._queues_lazily() for s in sessions):
                # Each session waits as its first turn's ticket; its task starts
                # when the scheduler grants that turn (see _Queued).
                starter = _Starter(tg, runner, bus, tool_limit, fleet._clock, len(sessions))
                queued = [_Queued(s, starter) for s in sessions]
                if queued:
                    tg.create_task(starter.keep(queued), name="agentflow-queued")
                for q in queued:
                    if turn_log is not None:
                        q.session._log = turn_log
                    try:
                        await scheduler.offer(q.session._first_ticket(fleet._clock), q)
                    except Exception as exc:  # a policy that raised: the session fails
                        q.set_exception(exc)  # with it, as its acquire would have
            else:
                tasks = [
                    tg.create_task(
                        run_one(s) if gate is None else gate.run(s, run_one),
                        name=s.session_id,
                    )
                    for s in sessions
                ]
                if gate is None:  # (a gate's session may be another worker's to end)
                    for s, t in zip(sessions, tasks, strict=True):
                        t.add_done_callback(if_never_ran(s, runner, bus, None))
            if fleet.freeze_gc:
                # After every session's first step: the queued ones' stacks are frozen
                # too; then, now and then, whatever the run has kept since.
                refreezer.start(asyncio.get_running_loop())
        result = FleetResult(
            sessions=_with_followers(
                sessions,
                _task_results(sessions, tasks, gate) if tasks is not None else _results(sessions),
            ),
            wall_s=(fleet._clock() - start) / 1e9,
            peak_in_flight=scheduler.peak_in_flight,
            callback_errors=bus.callback_errors,
            callback_errors_dropped=bus.callback_errors_dropped,
            retries=runner.retries,
            replicas=[ReplicaStats.of(r) for r in scheduler.replicas],
            start_ns=start,
        )
        _log.info("fleet.end", wall_s=result.wall_s, failed=len(result.failed))
        if finalize is not None:
            result = finalize(result)
        bus.emit(FleetEndEvent(result=result))
    except asyncio.CancelledError:
        cancelled = True  # a stalled async callback does not hold that up
        raise
    finally:
        _stop_probe(probe)
        refreezer.stop()
        fleet._carry.end(fleet._clock)  # the holds' time left, at the run's end
        try:
            await scheduler.aclose()
        except asyncio.CancelledError:
            # Cancelled while it waited for its dispatcher (a deadline, a consumer
            # leaving Fleet.stream as the run ends): the bus is closed all the same.
            cancelled = True
            raise
        finally:
            try:
                await bus.aclose(cancelled=cancelled)
            finally:
                fleet._scheduler = None
                if result is not None:  # with what its close could not deliver (a cancel
                    # during the close records it, then is raised: counted all the same)
                    result.callback_errors_dropped = bus.callback_errors_dropped
    assert result is not None
    return result


def _stop_probe(probe: asyncio.Task[list[str]] | None) -> None:
    """The run ended: a slot probe still waiting is dropped (it never delays the run)."""
    if probe is not None and not probe.done():
        probe.cancel()


def _results(sessions: list[Session]) -> list[SessionResult]:
    out = []
    for s in sessions:
        assert s.result is not None  # every session ran to its end
        out.append(s.result)
    return out


def _task_results(
    sessions: list[Session],
    tasks: list[asyncio.Task[SessionResult]],
    gate: SessionGate | None = None,
) -> list[SessionResult]:
    """Each session task's result. A task that ended cancelled though the run was not
    (a sync callback cancelled the session's task, the one it ran in) has none: the
    result of the session it ran is used — ``s``, or the one ``gate`` rebuilt from the
    store and ran in its place (a resumed run's) — ``CancelledError`` used to be raised
    out of the run instead, its result lost, though every other session had completed."""
    ran = gate.ran if gate is not None else {}
    out = []
    for s, t in zip(sessions, tasks, strict=True):
        own = ran.get(s.session_id, s.result) if t.cancelled() else None
        out.append(own if own is not None else t.result())
    return out


def _with_followers(sessions: list[Session], results: list[SessionResult]) -> list[SessionResult]:
    """Each session's result, followed by those of the sessions that ran in its place
    after it (``Session._followers``: a bench concurrency level's slot)."""
    out: list[SessionResult] = []
    for s, r in zip(sessions, results, strict=True):
        out.append(r)
        if s._followers:
            out += _with_followers(list(s._followers), _results(list(s._followers)))
    return out
