"""The parent's side of ``Fleet(workers=N)``: which backend's launcher, and the run's
steps (:func:`run_sharded`).

The steps live beside it: the checks (``_checks.py``), the run's state and what it does
on each worker's message and exit, its start, its lease broker wiring and the re-run of a
lost worker's sessions (``_sharded.py``: :class:`~agentflow._workers._sharded.ShardedRun`),
the heartbeat watchdog (``_watchdog.py``), the results, the sessions no worker finished
and the cancel path (``_results.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from agentflow._event_bus import EventBus
from agentflow._session import Session
from agentflow._workers._broker import WorkerHandle
from agentflow._workers._checks import check_picklable
from agentflow._workers._processes import ProcessLauncher
from agentflow._workers._sharded import MAX_RERUNS, ShardedRun

if TYPE_CHECKING:
    from agentflow._fleet import Fleet, FleetResult
    from agentflow.store._durable import DurableRun

__all__ = ["MAX_RERUNS", "Launcher", "check_picklable", "run_in_workers", "run_sharded"]


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
        """Hand the worker its configuration and sessions; a
        :class:`~agentflow._workers._sharded.WorkerLostError` if the worker died meanwhile
        (its sessions may run again), any other exception if it could not start (they
        fail with it). Either way the run kills the worker first."""
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

    def ended(self, w: WorkerHandle, how: str = "ended") -> tuple[str, int | None]:
        """How the worker ended, for a :class:`WorkerError`: its description ("worker
        0 (pid 12) ended (exit code -9)", with ``how`` for "ended": "worker 0 (pid 12)
        sent no heartbeat for 60 s and was killed (exit code -9)") and its exit code, if
        it has one."""
        ...

    async def reap(self, workers: list[WorkerHandle], timeout_s: float) -> None:
        """Every worker ends (asked, then forced after ``timeout_s``)."""
        ...

    def kill(self, w: WorkerHandle) -> None:
        """Stop ``w`` for good, at once (it is hung); its listener then finds it gone
        and calls ``on_exit(w, True)``. Never raises."""
        ...


async def run_in_workers(
    fleet: Fleet,
    sessions: list[Session],
    bus: EventBus,
    durable: DurableRun | None = None,
    finalize: Callable[[FleetResult], FleetResult] | None = None,
) -> FleetResult:
    """Run ``sessions`` on ``fleet.workers`` worker processes (or Ray actors, with
    ``backend="ray"``; no more than there are sessions), recording them in ``durable``'s
    store if given (``finalize``: see :class:`ShardedRun`); see the module docstring."""
    if fleet.backend == "ray" and sessions:  # (an empty run starts no worker anywhere)
        from agentflow._workers._ray import RayLauncher

        assert fleet.workers is not None
        launcher = await RayLauncher.connect()  # ray.init() off the loop, if needed
        launcher.check_cpus(fleet.workers, len(sessions))
        return await run_sharded(fleet, sessions, bus, launcher, durable, finalize)
    return await run_sharded(fleet, sessions, bus, ProcessLauncher(), durable, finalize)


async def run_sharded(
    fleet: Fleet,
    sessions: list[Session],
    bus: EventBus,
    launcher: Launcher,
    durable: DurableRun | None = None,
    finalize: Callable[[FleetResult], FleetResult] | None = None,
) -> FleetResult:
    """Run ``sessions`` on ``fleet.workers`` workers that ``launcher`` starts and reaches.

    With ``durable`` (the fleet has a store), this process owns the store: each worker
    sends what its sessions record (the same records as one process builds) over its
    channel, and they are written here; a worker lost mid-run (a killed process or
    actor, not one that crashed on its own) is replaced, and its sessions continue on
    the new one from their last recorded turn."""
    # The checks; nothing starts.
    run = ShardedRun(fleet, sessions, bus, launcher, durable, finalize)
    run.open()
    cancelled = False
    result: FleetResult | None = None
    try:
        run.spawn_workers()
        try:
            await run.run_workers()
        except asyncio.CancelledError:
            cancelled = True
            await run.cancel()
            raise
        result = run.finish()
    finally:
        try:
            await run.close(cancelled=cancelled)
        finally:
            if result is not None:  # (its close's too, a cancel during it included)
                result.callback_errors_dropped = bus.callback_errors_dropped
    assert result is not None
    return result
