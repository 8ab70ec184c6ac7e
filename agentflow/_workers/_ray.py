"""``Fleet(workers=N, backend="ray")``: the workers are Ray actors.

The same run as worker processes (:func:`~agentflow._workers._parent.run_sharded`: the
checks, the broker that leases the fleet's limits, the event merge, the results) and the
same worker (:class:`~agentflow._workers._worker.WorkerRun`: a fleet on leased limits
that batches its events); only the channel differs:

- driver → actor: one fire-and-forget ``deliver`` call per message (Ray runs an actor's
  calls from one caller in the order they were sent);
- actor → driver: the driver long-polls each actor (``poll`` returns every message
  queued since the last poll, waiting at most ``_POLL_S`` for one), so the actor never
  needs a handle on the driver. One poll is in flight per actor, so messages arrive in
  the order the actor sent them.

An actor that dies mid-run (``ray.kill``, its node lost, out of memory) fails its poll
with ``RayActorError`` (or its start, if it dies while starting): its unfinished sessions
are run again on a new actor — from the start, or with a store from their last recorded
turn (at most :data:`~agentflow._workers._rerun.MAX_RERUNS` times each). An actor
whose run failed on its own (its sessions do not unpickle there) is not replaced: its
sessions fail with a :class:`~agentflow.WorkerError` that says why.

A run with more workers than the cluster has CPUs is refused (a :class:`ConfigError`)
before any actor starts: each actor takes one CPU, and one that finished keeps it until
the run ends, so an actor without one would never be placed.

``ray`` is imported here only, when such a run starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from typing import Any

from agentflow._errors import ConfigError
from agentflow._logging import get_logger
from agentflow._workers._broker import WorkerHandle
from agentflow._workers._sharded import WorkerLostError
from agentflow._workers._worker import WorkerRun

__all__ = ["RayLauncher", "RayWorker"]

_log = get_logger("agentflow.workers")

#: How long an actor's ``poll`` waits for a message before it returns none.
_POLL_S = 1.0
#: How long ``poll`` holds events and status back, once it has some, for more to come:
#: each poll is an actor call with a fixed cost on both sides, so a poll per 5 ms event
#: batch would cost more than the events. Lease messages are sent at once.
_COALESCE_S = 0.02
#: Messages a poll returns at once (the broker is waiting on them).
_URGENT = frozenset({"want_slots", "want_rates", "return_slots", "return_spare", "crash", "done"})
#: How long a start waits for an actor to be placed and to take its sessions.
_START_TIMEOUT_S = 300.0


class RayWorker:
    """A worker as a Ray (async) actor: its run on the actor's event loop, its messages
    to the driver queued for the driver's next ``poll``."""

    def __init__(self) -> None:
        self._outbox: list[tuple[Any, ...]] = []
        self._wake: asyncio.Event | None = None
        self._urgent: asyncio.Event | None = None
        self._inbox: list[Any] = []  # what came before the run could take it
        self._on_message: Callable[[Any], None] | None = None
        self._task: asyncio.Task[None] | None = None

    def _send(self, msg: tuple[Any, ...]) -> None:
        self._outbox.append(msg)
        if self._wake is not None:
            self._wake.set()
        if msg[0] in _URGENT and self._urgent is not None:
            self._urgent.set()

    def _attach(self, loop: asyncio.AbstractEventLoop, on_message: Callable[[Any], None]) -> None:
        self._on_message = on_message
        inbox, self._inbox = self._inbox, []
        for msg in inbox:
            on_message(msg)

    async def start(self, config: dict[str, Any], blobs: list[bytes]) -> int:
        """Start the run in the background; the actor's process id."""
        self._wake = asyncio.Event()
        self._urgent = asyncio.Event()
        try:
            run = WorkerRun(config, blobs, self._send)
        except Exception as exc:  # its sessions do not load here: it says why, and ends
            self._send(("crash", f"{type(exc).__name__}: {exc}"))
            self._send(("done", {}))
            return os.getpid()
        self._task = asyncio.get_running_loop().create_task(self._main(run))
        return os.getpid()

    async def _main(self, run: WorkerRun) -> None:
        try:
            await run.main(self._attach, sigterm=False)
        except BaseException as exc:
            self._send(("crash", f"{type(exc).__name__}: {exc}"))
            self._send(("done", {}))
            if not isinstance(exc, Exception):
                raise

    async def deliver(self, msg: tuple[Any, ...]) -> None:
        """A message from the driver (a lease grant or reclaim, a cancel)."""
        if self._on_message is not None:
            self._on_message(msg)
        else:
            self._inbox.append(msg)

    async def poll(self) -> list[tuple[Any, ...]]:
        """Every message since the last poll; waits at most ``_POLL_S`` for one, then, if
        none is a lease message, at most ``_COALESCE_S`` more for one (events and status
        gather meanwhile)."""
        wake, urgent = self._wake, self._urgent
        if wake is not None and urgent is not None:
            if not self._outbox:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), _POLL_S)
            if self._outbox and not urgent.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(urgent.wait(), _COALESCE_S)
            urgent.clear()
        out, self._outbox = self._outbox, []
        return out


#: How long :meth:`RayLauncher.connect` waits for ``RAY_ADDRESS``'s host to accept a
#: connection before it calls ``ray.init()``.
_INIT_TIMEOUT_S = 10.0


def _host_port(address: str) -> tuple[str, int] | None:
    """``RAY_ADDRESS``'s host and port (``host:port``, ``ray://host:port``); ``None`` for
    ``auto``, ``local`` or anything else without a port (Ray finds those itself)."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


class RayLauncher:
    """Starts and reaches the run's workers as Ray actors (one CPU each, spread over the
    cluster's nodes). Built by :meth:`connect`, which connects to Ray with ``ray.init()``
    unless the caller already has (``ray.init(address=...)``): a ``RAY_ADDRESS`` or a Ray
    job's cluster, else a local Ray. It leaves Ray running after the run, as Ray's own
    libraries do."""

    rerun_lost = True

    @classmethod
    async def connect(cls, timeout_s: float | None = None) -> RayLauncher:
        """A launcher on a connected Ray: ``ray.init()`` first if Ray is not initialized.

        ``ray.init()`` runs on the loop's thread, as Ray wants (the main thread: it sets
        its SIGTERM handler there, which shuts Ray down; a local Ray's daemons die with
        the thread that started them). Against a ``RAY_ADDRESS`` that accepts no
        connection it retries for minutes, blocking the loop — so that host is asked
        first, off the loop and for at most ``timeout_s`` (default 10 s).

        Raises:
            ConfigError: ``RAY_ADDRESS``'s host does not accept a connection in time, or
                ``ray.init()`` failed; naming the address.
        """
        import ray

        if not ray.is_initialized():
            timeout = _INIT_TIMEOUT_S if timeout_s is None else timeout_s
            address = os.environ.get("RAY_ADDRESS")
            where = f"the Ray cluster at {address!r} (RAY_ADDRESS)" if address else "Ray"
            target = _host_port(address) if address else None
            if target is not None:
                try:
                    _, writer = await asyncio.wait_for(asyncio.open_connection(*target), timeout)
                except (OSError, TimeoutError) as exc:
                    why = str(exc) or f"no answer within {timeout:g} s"
                    raise ConfigError(
                        f"backend='ray': could not connect to {where}: {type(exc).__name__}: "
                        f"{why} — is it running and reachable from here?"
                    ) from None
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            try:
                ray.init()
            except Exception as exc:
                raise ConfigError(
                    f"backend='ray': could not connect to {where} (ray.init()): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return cls()

    def __init__(self) -> None:
        """A launcher on the Ray this process is connected to (see :meth:`connect`)."""
        import ray

        self._ray = ray
        self._actor_cls: Any = ray.remote(RayWorker)
        self._run = uuid.uuid4().hex[:8]
        self._names: dict[int, str] = {}

    def check_cpus(self, workers: int, sessions: int) -> None:
        """A :class:`ConfigError` unless the cluster has a CPU for each actor the run
        starts (``workers``, no more than its ``sessions``): an actor Ray cannot place
        would hold its sessions back for the whole start timeout and then fail them (a
        finished actor keeps its CPU until the run ends, so the others never free one
        for it)."""
        resources: Any = self._ray.cluster_resources  # untyped in Ray
        cpus = float(resources().get("CPU", 0))
        actors = min(workers, sessions)  # as ShardedRun starts them
        if actors > cpus:
            fewer = f"workers={int(cpus)} or fewer, or " if cpus >= 1 else ""
            starts = (
                "" if actors == workers else f" starts {actors} actors for {sessions} sessions;"
            )
            raise ConfigError(
                f"Fleet(workers={workers}, backend='ray'):{starts} each actor takes one CPU, "
                f"and the Ray cluster has {cpus:g}: use {fewer}a cluster with more CPUs"
            )

    def name(self, index: int) -> str:
        """The actor's name (``agentflow-<run>-<index>``, in the job's namespace):
        what ``ray list actors`` shows, and what ``ray.get_actor`` finds."""
        return f"agentflow-{self._run}-{index}"

    def launch(self, index: int, sessions: list[int]) -> WorkerHandle:
        name = self.name(index)
        actor: Any = self._actor_cls.options(
            name=name,
            num_cpus=1,
            scheduling_strategy="SPREAD",
            max_restarts=0,
        ).remote()

        def send(msg: tuple[Any, ...]) -> None:
            actor.deliver.remote(msg)

        return WorkerHandle(index, sessions, send=send, actor=actor)

    async def start(self, w: WorkerHandle, config: dict[str, Any], blobs: list[bytes]) -> None:
        """Hand the actor its run; a :class:`WorkerLostError` if it died meanwhile (its
        sessions run again), a :class:`TimeoutError` if it did not start in time."""
        from ray.exceptions import RayActorError

        try:
            w.process = await asyncio.wait_for(
                w.actor.start.remote(config, blobs), _START_TIMEOUT_S
            )  # its pid
        except RayActorError as exc:
            _log.warning("workers.actor_lost", actor=self.name(w.index), error=str(exc)[:200])
            raise WorkerLostError(
                f"Ray actor {self.name(w.index)} was lost while it started: {exc}"
            ) from exc
        except TimeoutError:
            raise TimeoutError(
                f"Ray actor {self.name(w.index)} did not start within {_START_TIMEOUT_S:.0f} s: "
                "does the cluster have a free CPU for each of the workers?"
            ) from None

    def listen(
        self,
        w: WorkerHandle,
        on_message: Callable[[WorkerHandle, Any], None],
        on_exit: Callable[[WorkerHandle, bool], None],
    ) -> None:
        w.listener = asyncio.get_running_loop().create_task(self._listen(w, on_message, on_exit))

    async def _listen(
        self,
        w: WorkerHandle,
        on_message: Callable[[WorkerHandle, Any], None],
        on_exit: Callable[[WorkerHandle, bool], None],
    ) -> None:
        from ray.exceptions import RayActorError

        try:
            while True:
                for msg in await w.actor.poll.remote():
                    on_message(w, msg)
                    if msg[0] == "done":
                        return
        except RayActorError as exc:
            _log.warning("workers.actor_lost", actor=self.name(w.index), error=str(exc)[:200])
            # Ray reports an actor that is only unreachable for now the same way
            # (ActorUnavailableError): stop it for good before its sessions run elsewhere,
            # or it would go on running them — twice, on slots handed to others.
            self.kill(w)
            on_exit(w, True)
        except Exception as exc:  # a message that does not unpickle: that worker is lost
            w.crash = f"{type(exc).__name__}: {exc}"
            self.kill(w)
            on_exit(w, False)

    def kill(self, w: WorkerHandle) -> None:
        """Stop ``w``'s actor for good (Ray does not restart it); never raises."""
        with contextlib.suppress(Exception):
            self._ray.kill(w.actor, no_restart=True)

    def ended(self, w: WorkerHandle, how: str = "ended") -> tuple[str, int | None]:
        pid = f", pid {w.process}" if w.process is not None else ""
        return f"Ray actor {w.index} ({self.name(w.index)}{pid}) {how}", None

    async def reap(self, workers: list[WorkerHandle], timeout_s: float) -> None:
        """Each actor is killed (its run is over, or was given ``timeout_s`` to stop)
        and its poll ended."""
        for w in workers:
            t = w.listener
            if t is not None and not t.done():
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(t, timeout_s)
        for w in workers:
            self.kill(w)
