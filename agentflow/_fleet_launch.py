"""Which way a fleet's run goes: in this process, in worker processes or Ray actors, or
recorded in a run store — a fresh run, or one resumed; and how :meth:`Fleet.stream`'s run
ends when its consumer leaves (:func:`finish_run`, :func:`cancel_run`).

:class:`~agentflow.Fleet` (``_fleet.py``) holds the options and the entry points; each
entry point hands its sessions and event bus here. A run in this process is
``_fleet_run.py``'s (inside ``frozen_gc``); one in workers, ``agentflow._workers``'s; a
recorded run goes through a ``DurableRun`` (``agentflow.store``), whose end is recorded
and committed whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow._event_bus import EventBus
from agentflow._fleet_checks import _check_clock, _check_unique, _release
from agentflow._fleet_run import _stop_probe, run_in_process
from agentflow._gcfreeze import frozen_gc
from agentflow.sched._scheduler import cancel_and_wait

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow._fleet import Fleet
    from agentflow._fleet_types import FleetResult
    from agentflow._session import Session
    from agentflow.store import Store
    from agentflow.store._durable import DurableRun

__all__ = ["cancel_run", "finish_run", "launch_run", "resume_run"]


async def launch_run(
    fleet: Fleet,
    sessions: list[Session],
    bus: EventBus,
    run_id: str | None,
    run_config: Mapping[str, Any] | None,
) -> FleetResult:
    """Run ``sessions`` (checked here, and held until the run ends) in workers when the
    fleet has them, else in this process; with the fleet's store, as a new recorded run
    (:meth:`Fleet.run`, :meth:`Fleet.stream`)."""
    _check_unique(sessions)
    try:
        return await _launch(fleet, sessions, bus, run_id, run_config)
    finally:
        _release(sessions)


async def _launch(
    fleet: Fleet,
    sessions: list[Session],
    bus: EventBus,
    run_id: str | None,
    run_config: Mapping[str, Any] | None,
) -> FleetResult:
    _check_clock(fleet._clock)
    if fleet.workers is not None and fleet.store is None:
        if run_id is not None or run_config is not None:
            raise ConfigError("run_id and run_config need a store: Fleet(store=...)")
        return await _run_in_workers(fleet, sessions, bus, None)
    if fleet.store is None:
        if run_id is not None or run_config is not None:
            raise ConfigError("run_id and run_config need a store: Fleet(store=...)")
        with frozen_gc(fleet.freeze_gc):
            return await run_in_process(fleet, sessions, bus, None)
    from agentflow.store._durable import DurableRun

    durable = await DurableRun.fresh(
        fleet.store,
        sessions,
        run_id=run_id,
        config=run_config,
        clock=fleet._clock,
        lease_ttl_s=fleet.lease_ttl_s,
    )
    return await _run_durable(fleet, durable, bus)


async def resume_run(
    fleet: Fleet,
    run_id: str,
    agents: Iterable[Agent] | Mapping[str, Agent],
    store: Store | None,
) -> FleetResult:
    """Continue the recorded run ``run_id`` of ``store`` (default: the fleet's), in
    workers when the fleet has them (:meth:`Fleet.resume`)."""
    from agentflow.store._durable import DurableRun

    store = store if store is not None else fleet.store
    if store is None:
        raise ConfigError("Fleet.resume needs a store: Fleet(store=...) or store=")
    durable = await DurableRun.resumed(
        store,
        run_id,
        agents,
        clock=fleet._clock,
        lease_ttl_s=fleet.lease_ttl_s,
        window=2 * fleet.max_concurrency,
    )
    if fleet.workers is not None:
        # The parent hands each worker its sessions at once: all are claimed now.
        try:
            await durable.admit_all()
        except BaseException:
            await durable.finish(None)
            raise
    return await _run_durable(
        fleet, durable, EventBus(fleet._callbacks, drain_s=fleet.callback_drain_s)
    )


async def _run_durable(fleet: Fleet, durable: DurableRun, bus: EventBus) -> FleetResult:
    """Run an attempt at a recorded run; whatever happens, its end is recorded and
    committed before this returns (or re-raises). The result — returned, and the
    ``FleetEndEvent``'s — is the whole run's (``DurableRun.merge``: its id, every session
    of a resumed run), built before that event is sent."""
    attempt: list[FleetResult] = []  # this attempt's own result, as the store records it

    def finalize(result: FleetResult) -> FleetResult:
        attempt.append(result)
        return durable.merge(result)

    run_sessions = len(durable.entries)
    bus.subscribe(durable.fleet_start)  # a cancelled attempt's end records the fleet's start
    result: FleetResult | None = None
    try:
        if fleet.workers is not None and durable.to_run:
            # The workers forward what they record; this process writes it.
            result = await _run_in_workers(fleet, durable.to_run, bus, durable, finalize)
        else:
            from agentflow.store._budgets import counting_live

            counting_live(durable.run_id, durable.created_wall_ns, durable.attempt, durable.to_run)
            with frozen_gc(fleet.freeze_gc):
                result = await run_in_process(
                    fleet,
                    durable.to_run,
                    bus,
                    durable.recorder,
                    durable.gate,
                    run_sessions=run_sessions,
                    finalize=finalize,
                )
    finally:
        await durable.finish(attempt[0] if result is not None else None)
    return result


async def _run_in_workers(
    fleet: Fleet,
    sessions: list[Session],
    bus: EventBus,
    durable: DurableRun | None,
    finalize: Callable[[FleetResult], FleetResult] | None = None,
) -> FleetResult:
    from agentflow._workers import run_in_workers

    probe = fleet._probe_slots(len(sessions))
    try:
        return await run_in_workers(fleet, sessions, bus, durable, finalize)
    finally:
        _stop_probe(probe)


async def finish_run(task: asyncio.Task[Any]) -> None:
    """Wait until the stream's run ``task``, past its :class:`FleetEndEvent`, has ended
    (its async callbacks' drain is bounded by ``callback_drain_s``); what it raised is
    raised. A cancel of the consumer's meanwhile (a deadline, a Ctrl-C) cancels the run,
    as :func:`cancel_run` does, and is raised once the run has ended."""
    try:
        await asyncio.wait({task})  # raises only the caller's cancel
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # the consumer's cancel is what it gets
            await cancel_and_wait(task)
        raise
    task.result()


async def cancel_run(task: asyncio.Task[Any]) -> None:
    """Cancel the stream's run ``task`` and wait until it has ended.

    Only the run's own cancellation is swallowed: a cancel that reaches the consumer
    before or meanwhile (a Ctrl-C during the loop's body, a deadline falling due while
    ``aclosing`` closes the stream) is raised, once the run has ended; it also cancels
    the run's cleanup once more, which hurries (a store's shielded flush gives up:
    :func:`~agentflow.sched._scheduler.cancel_and_wait`). It used to be swallowed with
    the run's, so code past a deadline (or a Ctrl-C) ran on.
    """
    await cancel_and_wait(task)
