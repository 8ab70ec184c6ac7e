"""The :class:`Fleet`: many sessions at once — one scheduler, one router, one event bus.

Here: its options and its entry points (:meth:`Fleet.run`, :meth:`Fleet.stream`,
:meth:`Fleet.resume`), one run at a time. Which way a run goes is ``_fleet_launch.py``'s
— in this process (``_fleet_run.py``; a session waiting as its first turn's ticket:
``_fleet_queued.py``), in worker processes or Ray actors (``agentflow._workers``),
recorded in a run store (``agentflow.store``). The checks of its options and of a run's
sessions are in ``_fleet_checks.py``; what a run returns, in ``_fleet_types.py``. Names
that moved out are still importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Literal, cast

from agentflow._config import fleet_concurrency
from agentflow._counts import check_count, check_flag
from agentflow._errors import ConfigError
from agentflow._event_bus import DEFAULT_CALLBACK_DRAIN_S, EventBus
from agentflow._events import Event, FleetEndEvent
from agentflow._fleet_checks import (
    _replicas,
    check_callback,
    check_callbacks,
    check_drain,
    check_function,
    check_parts,
    check_scale_out,
    check_sessions,
    check_store,
)
from agentflow._fleet_launch import cancel_run, finish_run, launch_run, resume_run
from agentflow._fleet_queued import _Queued as _Queued
from agentflow._fleet_queued import _Starter as _Starter
from agentflow._fleet_run import _results as _results
from agentflow._fleet_types import FleetResult, ReplicaStats
from agentflow._session import Session
from agentflow.sched import (
    Limits,
    Policy,
    Replica,
    RetryPolicy,
    Router,
    Scheduler,
    TurnRunner,
    policy_by_name,
)
from agentflow.sched._carry import Carry
from agentflow.sched._scheduler import check_warmup_timeout
from agentflow.sched._warmups import WARMUP_TIMEOUT_S
from agentflow.typing import Callback, Clock, Transport

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow.store import Store

__all__ = ["Fleet", "FleetResult", "ReplicaStats"]


class Fleet:
    """Runs sessions concurrently against one or more replicas.

    Args:
        transport: where model turns go — a transport (:class:`HTTPTransport`, …), a
            :class:`Replica` (a transport with its own limits), or a list of them to
            route across.
        max_concurrency: the most model requests in flight at once, fleet-wide (64 when
            not given). Sessions between turns (running tools) hold no slot.
        max_tool_concurrency: the most tool calls running at once, fleet-wide.
        policy: which ready turn goes next: a :class:`~agentflow.sched.Policy` or one of
            ``"fcfs"``, ``"fair"``, ``"plas"``, ``"priority"``, ``"deadline"``.
        limits: fleet-wide request and token rates. Its ``max_in_flight`` is set from
            ``max_concurrency``; setting it here is deprecated, and a ConfigError when it
            differs from ``max_concurrency``.
        router: how turns are placed across replicas (sticky, prefix-affine, least-loaded).
        retry: how failed turns are retried; ``None`` never retries.
        prefix_warmup: send one request per cold shared prefix before the rest.
        warmup_timeout_s: how long the requests parked behind a prefix's leader wait for
            its first token before they go anyway (``None``: until its stream ends) — on a
            replica that shares at the end, also how long the leader may then go without
            a delta.
        callbacks: sync or async callables, each called with every :data:`Event` (one
            that is not callable is a ConfigError naming it).
        clock: nanosecond monotonic clock for queue waits and tool durations.
        sleep: how retries wait (inject a fake in tests).
        freeze_gc: for the run, keep the objects that exist when it starts out of the
            garbage collector's full passes (``gc.freeze()``), so a full collection
            does not stall every stream at once; see ``docs/architecture.md``.
        store: record every run in this run store (``agentflow.store``; e.g.
            :class:`~agentflow.store.SQLiteStore`) so that a killed run can be resumed
            with :meth:`resume`; see ``docs/store.md``. With ``workers``, this process
            writes the store: the workers send it what their sessions record, and a
            killed worker's sessions continue on a new one from their recorded turns.
        lease_ttl_s: with a ``store``: how long a session's lease outlives a worker that
            stops renewing it (renewed every third of it while the run goes).
        workers: with N ≥ 2, :meth:`run` and :meth:`stream` shard the sessions over N
            worker processes (each with its own loop and connections; callbacks run
            here; the limits hold across them) — no more than there are sessions.
            Transports, agents and tools must pickle; see ``docs/scale-out.md``.
            ``None`` or 1: this process only. At most 256.
        stop_timeout_s: with ``workers``: how long a cancelled run waits for the
            workers' partial results (and each worker to exit) before killing it; a
            finite number of seconds in [0.001, 1e9].
        heartbeat_timeout_s: with ``workers``: a worker whose loop is blocked longer
            than this (nothing heard from it, though a running worker reports every
            0.25 s) is declared hung: it is killed and handled as a worker that died
            (its unfinished sessions fail with a :class:`~agentflow.WorkerError` naming
            the missed heartbeat, or continue on a new worker as a lost worker's do).
            Counted from a worker's first message and not after it ended; while it
            starts, the bound is 300 s (or this, if longer). At least 1 s (a running
            worker reports every 0.25 s); ``None``: never.
        probe_slots: when a run starts, ask each HTTP endpoint not asked before in this
            process for its llama.cpp slots (one ``GET /props``, in the background; the
            run never waits for it) and log a warning when the run can have more
            requests in flight there (:mod:`agentflow.llamacpp`). ``False``: never ask —
            for a server that must see only chat requests, or one behind a gateway that
            counts every request.
        backend: where the ``workers`` run: ``"processes"`` (the default: worker
            processes on this machine) or ``"ray"`` (Ray actors, on this machine or a
            Ray cluster: ``pip install 'agentflow[ray]'``; a worker whose actor is lost
            has its unfinished sessions run again on a new one — with a ``store``, from
            their last recorded turn). With ``"ray"``, ``workers=N`` is the number of
            actors: one is allowed, and more than the cluster's CPUs (one each) is a
            :class:`ConfigError` when the run starts; see ``docs/scale-out.md``.
        callback_drain_s: how long the end of a run waits for async callbacks to take
            the events still queued for them, in seconds (``math.inf``: no bound). Then
            the delivery is cancelled and each event not delivered is in
            ``result.callback_errors`` (a ``TimeoutError``): a stalled callback cannot
            hang the run. A cancelled run does not wait for them at all.
    """

    def __init__(
        self,
        transport: Transport | Replica | Sequence[Transport | Replica],
        *,
        max_concurrency: int | None = None,
        max_tool_concurrency: int = 64,
        policy: Policy | str = "fcfs",
        limits: Limits | None = None,
        router: Router | None = None,
        retry: RetryPolicy | None = RetryPolicy(),
        prefix_warmup: bool = True,
        warmup_timeout_s: float | None = WARMUP_TIMEOUT_S,
        callbacks: Iterable[Callback] = (),
        clock: Clock = time.perf_counter_ns,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        freeze_gc: bool = True,
        store: Store | None = None,
        lease_ttl_s: float = 60.0,
        workers: int | None = None,
        stop_timeout_s: float = 10.0,
        heartbeat_timeout_s: float | None = 60.0,
        backend: Literal["processes", "ray"] = "processes",
        probe_slots: bool = True,
        callback_drain_s: float = DEFAULT_CALLBACK_DRAIN_S,
    ) -> None:
        check_parts(policy=policy, limits=limits, router=router, retry=retry)
        max_concurrency, limits = fleet_concurrency(max_concurrency, limits or Limits())
        check_count(max_tool_concurrency, "Fleet.max_tool_concurrency")
        self.replicas = _replicas(transport)
        self.max_concurrency = max_concurrency
        self.max_tool_concurrency = max_tool_concurrency
        self.policy = policy_by_name(policy) if isinstance(policy, str) else policy
        self.limits = limits
        self.router = router
        self.retry = retry
        self.prefix_warmup = check_flag(prefix_warmup, "Fleet.prefix_warmup")
        self.warmup_timeout_s = check_warmup_timeout(warmup_timeout_s, "Fleet.warmup_timeout_s")
        self._callbacks = check_callbacks(callbacks)
        check_drain(callback_drain_s)
        self.callback_drain_s = callback_drain_s
        check_function(clock, "Fleet.clock", "monotonic nanoseconds, as time.perf_counter_ns")
        check_function(sleep, "Fleet.sleep", "an async sleep of seconds, as asyncio.sleep")
        self._clock = clock
        self._sleep = sleep
        self.freeze_gc = freeze_gc
        check_scale_out(
            lease_ttl_s=lease_ttl_s,
            workers=workers,
            stop_timeout_s=stop_timeout_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
            backend=backend,
        )
        check_store(store, "Fleet.store")
        self.store = store
        self.lease_ttl_s = lease_ttl_s
        self.backend = backend
        self.workers = (
            workers if workers is not None and (workers > 1 or backend == "ray") else None
        )
        self.stop_timeout_s = stop_timeout_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.probe_slots = check_flag(probe_slots, "Fleet.probe_slots")
        self._lease_messages = 0  # with workers: the last run's lease messages
        self._live: list[tuple[int, int]] | None = None  # with workers, while a run goes
        self._scheduler: Scheduler | None = None
        # The rate buckets (the fleet's, each replica's) and the replicas' Retry-After
        # holds: the fleet's, kept across its runs (each run's scheduler is new).
        self._carry = Carry()
        self._running = False  # a run, stream or resume is going (one at a time)

    @property
    def in_flight(self) -> int:
        """Model requests streaming now (0 when no run is going; with ``workers``, as
        the workers last told, every 0.25 s)."""
        if self._live is not None:
            return sum(x[0] for x in self._live)
        return self._scheduler.in_flight if self._scheduler is not None else 0

    @property
    def queued(self) -> int:
        """Model turns waiting for a slot now (0 when no run is going; with ``workers``,
        as the workers last told, every 0.25 s)."""
        if self._live is not None:
            return sum(x[1] for x in self._live)
        return self._scheduler.waiting if self._scheduler is not None else 0

    @property
    def transport(self) -> Transport:
        """The first replica's transport (the only one, for a single-server fleet)."""
        return self.replicas[0].transport

    def subscribe(self, callback: Callback) -> None:
        """Add a callback for every later run.

        Raises:
            ConfigError: ``callback`` is not callable.
        """
        check_callback(callback, "Fleet.subscribe: callback")
        self._callbacks.append(callback)

    async def run(
        self,
        sessions: Iterable[Session],
        *,
        run_id: str | None = None,
        run_config: Mapping[str, Any] | None = None,
    ) -> FleetResult:
        """Run every session to its end and return their results.

        A failed session does not stop the others; its error is on its result.

        One run at a time: :meth:`run`, :meth:`stream` or :meth:`resume` while this
        fleet is running one is a :class:`ConfigError` (each run would have its own
        ``max_concurrency``, so the servers would see twice it).

        Args:
            sessions: the sessions (``agent.session(task)``), each not run before;
                anything else (a task, an agent, ``None``) is a :class:`ConfigError`.
            run_id: with a ``store``: the run's id (default: a new one, on the result's
                ``run_id``); an id already in the store is a :class:`ConfigError`.
            run_config: with a ``store``: a mapping of JSON-able facts to keep with the
                run (what rebuilds its workload on resume); never put credentials here.

        With a ``store``, agents of one name must share one configuration (a run keeps
        one per name): two that differ are a :class:`ConfigError` naming it, before
        anything is recorded — give each configuration its own name.
        """
        with self._one_run("run"):
            return await launch_run(
                self,
                check_sessions(sessions, "Fleet.run"),
                EventBus(self._callbacks, drain_s=self.callback_drain_s),
                run_id,
                run_config,
            )

    async def resume(
        self,
        run_id: str,
        *,
        agents: Iterable[Agent] | Mapping[str, Agent],
        store: Store | None = None,
    ) -> FleetResult:
        """Continue a recorded run where it stopped (killed, cancelled, or failed).

        Sessions that completed (or hit ``max_turns``) are not run again; the others
        continue from their last recorded turn — a turn in flight when the run stopped
        is run again, and a recorded tool result is used as it is, never run again.
        The result holds every session of the run, earlier turns included. With
        ``workers``, the sessions to run are claimed at once and handed to the workers
        restored. See ``docs/store.md``.

        Args:
            run_id: the run (``FleetResult.run_id``, ``agentflow resume``).
            agents: the agents the run's sessions talk to, by name (tools are code: the
                store keeps their schemas, not them).
            store: the store to read (default: the fleet's).

        Raises:
            RunNotFound: the store has no such run.
            ConfigError: no store; ``agents`` is not an iterable (or a mapping) of
                :class:`Agent`; an agent is missing, or configured differently from the
                one the run recorded (the message names it).
        """
        check_store(store, "Fleet.resume: store")
        with self._one_run("resume"):
            return await resume_run(self, run_id, agents, store)

    async def stream(self, sessions: Iterable[Session]) -> AsyncGenerator[Event, None]:
        """Run the sessions and yield every event; the last is a :class:`FleetEndEvent`.

        Leaving the loop early cancels the run once the generator is closed — at once
        inside ``async with contextlib.aclosing(fleet.stream(sessions)) as events:``;
        an abandoned one is closed only when Python finalizes it (until then the run goes
        on, and the fleet refuses another). Leaving it at the :class:`FleetEndEvent`
        does not: the close waits for the run's end, where async callbacks catch up on
        the last events (``session_end``, ``fleet_end``; at most ``callback_drain_s``) —
        cancelling it there used to cut them off.

        The events wait for the consumer in a queue without bound: a slow consumer never
        slows the run (nor holds back a server's stream), and every event it has not
        taken yet is kept in memory, a token event per streamed delta among them — by
        the run's end, possibly most of the run's events. A consumer that cannot keep up
        (a websocket per event) should take fewer: a callback that declares
        ``event_types`` (without ``"token"``, no token event is built for it), or its
        own bounded queue that drops what it cannot send.
        """
        with self._one_run("stream"):  # until the run's task has ended
            bus = EventBus(self._callbacks, drain_s=self.callback_drain_s)
            queue: asyncio.Queue[Event | None] = asyncio.Queue()
            bus.add_queue(cast("asyncio.Queue[Event]", queue))
            listed = check_sessions(sessions, "Fleet.stream")
            task = asyncio.create_task(launch_run(self, listed, bus, None, None))
            # A run that fails before its end event (sessions refused, a store that
            # cannot be opened) ends the stream too: ``None`` after its last event, and
            # its error is raised below; else the loop would wait for events forever.
            task.add_done_callback(lambda _: queue.put_nowait(None))
            ended = False  # the FleetEndEvent was yielded: the run is only closing
            try:
                while True:
                    event = await queue.get()
                    if event is None:
                        break
                    ended = isinstance(event, FleetEndEvent)
                    yield event
                    if ended:
                        break
                await task
            finally:
                if not task.done():
                    await (finish_run(task) if ended else cancel_run(task))

    @contextlib.contextmanager
    def _one_run(self, entry: str) -> Iterator[None]:
        """Holds the fleet for one run at a time.

        The fleet's ``max_concurrency`` is kept by the run's scheduler, and what a run
        reports (``peak_in_flight``, the replicas' stats, ``in_flight``) is read from
        it: two runs at once would each have their own, so the servers would see twice
        the cap. A second run is refused rather than sharing one scheduler, whose
        figures would then mix both runs'. (The rate buckets and ``Retry-After`` holds
        are the fleet's, handed to each run's scheduler in turn: ``_carry.py``.)
        """
        if self._running:
            raise ConfigError(
                f"Fleet.{entry}: this Fleet is already running a run (run, stream or resume); "
                "its max_concurrency and limits hold for one run at a time. Put every "
                "session in one run, or use another Fleet (with its own limits)"
            )
        self._running = True
        try:
            yield
        finally:
            self._running = False

    #: Whether a run asks its HTTP endpoints for their llama.cpp slots (a worker of
    #: ``Fleet(workers=N)`` does not: its parent does, once).
    _probes_slots = True

    def _probe_slots(self, sessions: int) -> asyncio.Task[list[str]] | None:
        """In the background, ask each HTTP endpoint not asked before (in this process) for
        its llama.cpp slots, and log a warning when the run can have more requests in
        flight there (``agentflow.llamacpp``); ``None`` when there is nothing to ask."""
        if not (self.probe_slots and self._probes_slots) or not any(
            hasattr(r.transport, "config") for r in self.replicas
        ):
            return None
        from agentflow.llamacpp import fleet_endpoints, watch_fleet_slots

        endpoints = fleet_endpoints(self.replicas, self.max_concurrency, sessions)
        if not endpoints:
            return None
        return asyncio.get_running_loop().create_task(
            watch_fleet_slots(endpoints), name="agentflow-slots"
        )

    def _new_scheduler(self) -> Scheduler:
        """The run's scheduler (a worker of ``Fleet(workers=N)`` leases its limits), on
        the fleet's rate buckets and replica holds, which span its runs: a fleet that
        runs one batch per call stays within its limits (they started afresh each run)."""
        self._carry.begin(self._clock)
        return Scheduler(
            self.replicas,
            policy=self.policy,
            limits=self.limits,
            router=self.router if self.router is not None else Router(),
            clock=self._clock,
            prefix_warmup=self.prefix_warmup,
            warmup_timeout_s=self.warmup_timeout_s,
            carry=self._carry,
        )

    def _new_runner(self, scheduler: Scheduler) -> TurnRunner:
        """The run's turn runner (a worker of ``Fleet(workers=N)`` keeps it, to report
        its retries to the parent while the run goes)."""
        return TurnRunner(scheduler, self.retry, sleep=self._sleep)
