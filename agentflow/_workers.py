"""``Fleet(workers=N)``: one run's sessions sharded over N worker processes.

Each worker is a ``spawn``-started process with its own event loop, scheduler and
connections; it runs the sessions it was given from start to end (a session never
moves). The parent keeps what must be one for the whole run:

- **the user's callbacks** — workers forward the events the parent's bus wants, in
  batches (one message per ~5 ms or 256 events over the worker's pipe: token events
  msgpack-encoded with msgspec, the others pickled); token events only when some
  callback reads them;
- **the fleet's limits** — a :class:`_Broker` leases ``max_in_flight`` slots and
  RPM/TPM budget to the workers in batches. A worker spends its lease locally (no
  round trip per request), asks for more when it runs out, and gives slots back when
  the broker reclaims them for a worker that has none. The sum of the leases never
  exceeds the fleet's limits, so neither does what the workers send;
- **the result** — every :class:`SessionResult` (from the workers' ``session_end``
  events) in the order the sessions were given, merged replica counts and retries.

Liveness: a worker dies with its parent (``PR_SET_PDEATHSIG`` on Linux, and it exits
when its pipe to the parent closes, everywhere); a worker that dies fails its
unfinished sessions with :class:`WorkerError` and the run goes on; cancelling the
run cancels the workers' runs, waits ``stop_timeout_s`` for their partial results,
then kills them. See ``docs/scale-out.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow._errors import ConfigError, TransportError, WorkerError
from agentflow._events import (
    AttemptDiscardedEvent,
    ErrorEvent,
    Event,
    EventBus,
    FleetEndEvent,
    FleetStartEvent,
    RetryEvent,
    SessionEndEvent,
    TokenEvent,
)
from agentflow._logging import get_logger
from agentflow._session import Session, SessionResult
from agentflow.sched import Limits, Scheduler
from agentflow.sched._limits import RateGate, _bucket

if TYPE_CHECKING:
    from agentflow._fleet import Fleet, FleetResult

__all__ = ["run_in_workers"]

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
_BATCH_EVENTS = 256
_BATCH_S = 0.005
#: How often a worker tells the parent its requests in flight and queued.
_STATUS_S = 0.25
_PR_SET_PDEATHSIG = 1


# -- checks -------------------------------------------------------------------------


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


# -- the parent's side ----------------------------------------------------------------


@dataclass(slots=True)
class _Worker:
    index: int
    process: Any  # multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    sessions: list[int]  # indexes into the run's sessions
    reader: threading.Thread | None = None
    done: asyncio.Future[dict[str, Any]] | None = None
    alive: bool = True
    crash: str = ""  # the last line of the traceback that ended it, if it sent one


class _Broker:
    """The fleet's limits, leased to workers in batches (parent side)."""

    def __init__(self, limits: Limits, workers: list[_Worker], live: list[tuple[int, int]]) -> None:
        self.workers = workers
        self.live = live  # per worker, its last told (in flight, queued)
        self.cap = limits.max_in_flight
        n = len(workers)
        # Each worker starts with its fair share, so an even load moves no slot at all.
        self.held = [
            0 if self.cap is None else self.cap // n + (i < self.cap % n) for i in range(n)
        ]
        self.free = 0
        self.pending: dict[int, int] = {}
        self.reclaiming = [0] * n
        self.slot_batch = max(1, (self.cap or 1) // (2 * n))
        self._req = _bucket(limits.rpm, limits.burst_s, 1.0) if limits.rpm is not None else None
        self._tok = _bucket(limits.tpm, limits.burst_s, 1.0) if limits.tpm is not None else None
        self.req_batch = max(1, int(self._req.max_rate // (2 * n))) if self._req is not None else 0
        self.tok_batch = max(1.0, self._tok.max_rate / (2 * n)) if self._tok is not None else 0.0
        self._rate_lock = asyncio.Lock()
        self._rate_tasks: set[asyncio.Task[None]] = set()
        #: Messages the broker exchanged (grants, returns, reclaims): the lease overhead.
        self.messages = 0
        #: Requests and tokens granted to workers.
        self.granted_requests = 0
        self.granted_tokens = 0.0

    def _send(self, i: int, msg: tuple[Any, ...]) -> None:
        w = self.workers[i]
        if w.alive:
            self.messages += 1
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(msg)

    # slots
    def want_slots(self, i: int, n: int) -> None:
        self.messages += 1
        give = min(n, self.free)
        if give > 0:
            self.free -= give
            self.held[i] += give
            self._send(i, ("slots", give))
            return
        self.pending[i] = max(n, self.pending.get(i, 0))
        self._reclaim_for(i)

    def _reclaim_for(self, i: int) -> None:
        assert self.cap is not None
        active = sum(
            1 for j, w in enumerate(self.workers) if w.alive and (self.held[j] or j in self.pending)
        )
        fair = self.cap // max(1, active)
        for j in range(len(self.workers)):
            if j != i:
                self.idle_check(j)
        if self.held[i] >= fair and fair > 0:
            # At its share already: it waits for slots that come free, and none moves
            # back and forth between two saturated workers.
            return
        for j, w in enumerate(self.workers):
            if j == i or not w.alive:
                continue
            excess = self.held[j] - max(fair, 0) - self.reclaiming[j]
            if excess > 0 and (fair > 0 or self.held[j] > 0):
                self.reclaiming[j] += excess
                self._send(j, ("reclaim", excess))

    def idle_check(self, j: int) -> None:
        """While a worker waits for slots: ask one that had nothing queued when it last
        told (every 0.25 s) for the slots it is not using. Only what is free when the
        ask arrives comes back; nothing is owed, so a busy worker keeps its slots."""
        if not self.pending or j in self.pending or not self.workers[j].alive:
            return
        in_flight, queued = self.live[j]
        spare = self.held[j] - in_flight - self.reclaiming[j]
        if queued == 0 and spare > 0:
            self._send(j, ("spare", spare))

    def returned(self, i: int, n: int, *, owed: bool = True) -> None:
        self.messages += 1
        self.held[i] -= n
        if owed:
            self.reclaiming[i] = max(0, self.reclaiming[i] - n)
        self.free += n
        self._serve_pending()

    def _serve_pending(self) -> None:
        for j in list(self.pending):
            if self.free <= 0:
                break
            n = self.pending.pop(j)
            if not self.workers[j].alive:
                continue
            give = min(n, self.free)
            if give < n:  # the rest stays asked for: the worker does not ask again
                self.pending[j] = n - give
            self.free -= give
            self.held[j] += give
            self._send(j, ("slots", give))

    def worker_gone(self, i: int) -> None:
        self.free += self.held[i]
        self.held[i] = 0
        self.reclaiming[i] = 0
        self.pending.pop(i, None)
        self._serve_pending()

    # rates
    def want_rates(self, i: int, requests: int, tokens: float) -> None:
        self.messages += 1
        task = asyncio.get_running_loop().create_task(self._grant_rates(i, requests, tokens))
        self._rate_tasks.add(task)
        task.add_done_callback(self._rate_tasks.discard)

    async def _grant_rates(self, i: int, requests: int, tokens: float) -> None:
        async with self._rate_lock:
            req = max(requests, self.req_batch) if self._req is not None else 0
            tok = max(tokens, self.tok_batch) if self._tok is not None else 0.0
            if self._req is not None:
                req = min(req, max(1, int(self._req.max_rate)))
                await self._req.charge(req)
            if self._tok is not None:
                left = tok
                while left > 0:
                    part = min(left, self._tok.max_rate)
                    await self._tok.charge(part)
                    left -= part
            self.granted_requests += req
            self.granted_tokens += tok
        self._send(i, ("rates", req, tok))

    async def aclose(self) -> None:
        for t in list(self._rate_tasks):
            t.cancel()
        for t in list(self._rate_tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await t


async def run_in_workers(fleet: Fleet, sessions: list[Session], bus: EventBus) -> FleetResult:
    """Run ``sessions`` on ``fleet.workers`` worker processes; see the module docstring."""
    from agentflow._fleet import FleetResult, ReplicaStats

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
    ctx = multiprocessing.get_context("spawn")
    workers: list[_Worker] = []
    shards: list[list[int]] = [[] for _ in range(n)]
    for k in range(len(sessions)):
        shards[k % n].append(k)
    index = {s.session_id: k for k, s in enumerate(sessions)}
    results: list[SessionResult | None] = [None] * len(sessions)
    broker: _Broker | None = None
    # Per worker, its last (in flight, queued): Fleet.in_flight and .queued sum them.
    live = [(0, 0)] * n
    fleet._live = live

    def on_message(w: _Worker, msg: Any) -> None:
        kind = msg[0]
        if kind == "events":
            for event in _decode(msg[1]):
                if isinstance(event, SessionEndEvent):
                    k = index.get(event.session_id)
                    if k is not None:  # the caller's Session ends as if it ran here
                        results[k] = s = event.result
                        session = sessions[k]
                        session.result, session.messages, session.turns = s, s.messages, s.turns
                bus.emit(event)
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

    def on_exit(w: _Worker) -> None:
        w.alive = False
        live[w.index] = (0, 0)
        if broker is not None:
            broker.worker_gone(w.index)
        if w.done is not None and not w.done.done():
            w.done.set_result({})

    try:
        for i in range(n):
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=_worker_entry,
                args=(child_conn, os.getpid()),
                name=f"agentflow-worker-{i}",
                daemon=True,
            )
            proc.start()
            child_conn.close()
            w = _Worker(i, proc, parent_conn, shards[i], done=loop.create_future())
            workers.append(w)
        broker = _Broker(fleet.limits, workers, live)
        config = {
            "replicas": fleet.replicas,
            "policy": fleet.policy,
            "retry": fleet.retry,
            "router": fleet.router,
            "prefix_warmup": fleet.prefix_warmup,
            "max_tool_concurrency": fleet.max_tool_concurrency,
            "freeze_gc": fleet.freeze_gc,
            "wanted": wanted,
            "slots": fleet.limits.max_in_flight is not None,
            "slot_batch": broker.slot_batch,
            "initial_slots": 0,
            "rates": fleet.limits.rpm is not None or fleet.limits.tpm is not None,
            "rpm": fleet.limits.rpm is not None,
            "tpm": fleet.limits.tpm is not None,
            "req_batch": broker.req_batch,
            "tok_batch": broker.tok_batch,
        }
        starts = []
        for w in workers:
            # Sent from a thread: a large start blocks until the worker has imported.
            config = {**config, "initial_slots": broker.held[w.index]}
            msg = ("start", config, [blobs[k] for k in w.sessions])
            starts.append(loop.run_in_executor(None, _send_quietly, w.conn, msg))
        await asyncio.gather(*starts)
        for w in workers:
            w.reader = threading.Thread(
                target=_read_parent_side,
                args=(w, loop, on_message, on_exit),
                name=f"agentflow-worker-{w.index}-reader",
                daemon=True,
            )
            w.reader.start()
        try:
            stats = await asyncio.gather(*(w.done for w in workers if w.done is not None))
        except asyncio.CancelledError:
            await _stop(workers, fleet.stop_timeout_s)
            _fail_missing(sessions, results, workers, bus, "cancelled")
            raise
        _fail_missing(sessions, results, workers, bus, "error")
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
        _log.info("workers.end", workers=n, lease_messages=broker.messages)
        bus.emit(FleetEndEvent(result=result))
        return result
    finally:
        fleet._live = None
        if broker is not None:
            await broker.aclose()
        await bus.aclose()  # async callbacks and stream() queues have had every event
        await _reap(workers, fleet.stop_timeout_s)


def _send_quietly(conn: multiprocessing.connection.Connection, msg: tuple[Any, ...]) -> None:
    """Send; a worker that is gone already is found by its reader (its sessions fail)."""
    with contextlib.suppress(OSError, ValueError):
        conn.send(msg)


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
    workers: list[_Worker],
    bus: EventBus,
    status: str,
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
                code = w.process.exitcode
                why = f": {w.crash}" if w.crash else ""
                error = WorkerError(
                    f"worker {w.index} (pid {w.process.pid}) ended (exit code {code}) "
                    f"before session {s.session_id!r} did{why}",
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


async def _stop(workers: list[_Worker], timeout_s: float) -> None:
    """Cancel every worker's run and wait (at most ``timeout_s``) for its partial results."""
    for w in workers:
        if w.alive:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(("cancel",))
    waits = [w.done for w in workers if w.done is not None and not w.done.done()]
    if waits:
        await asyncio.wait(waits, timeout=timeout_s)


async def _reap(workers: list[_Worker], timeout_s: float) -> None:
    """Every worker process ends: joined, else terminated, else killed."""
    loop = asyncio.get_running_loop()
    for w in workers:
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(("exit",))
    for w in workers:
        await loop.run_in_executor(None, w.process.join, timeout_s)
        if w.process.exitcode is None:
            w.process.terminate()
            await loop.run_in_executor(None, w.process.join, 2.0)
        if w.process.exitcode is None:
            w.process.kill()
            await loop.run_in_executor(None, w.process.join, 2.0)
        w.conn.close()
        if w.reader is not None:
            await loop.run_in_executor(None, w.reader.join, 2.0)


def _read_parent_side(
    w: _Worker,
    loop: asyncio.AbstractEventLoop,
    on_message: Callable[[_Worker, Any], None],
    on_exit: Callable[[_Worker], None],
) -> None:
    try:
        while True:
            msg = w.conn.recv()
            loop.call_soon_threadsafe(on_message, w, msg)
    except (EOFError, OSError, ValueError):
        pass
    except Exception as exc:  # a message that does not unpickle: the worker is lost
        _log.error("worker.bad_message", worker=w.index, error=repr(exc))
    with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
        loop.call_soon_threadsafe(on_exit, w)


# -- the worker's side ----------------------------------------------------------------


def _worker_entry(conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """A worker process: die with the parent, ignore the terminal's Ctrl-C (the parent
    stops the run in order), run the sessions it is sent."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        msg = conn.recv()
    except (EOFError, OSError):
        os._exit(0)
    if msg[0] != "start":
        os._exit(1)
    try:
        asyncio.run(_WorkerRun(conn, msg[1], msg[2]).main())
    except BaseException as exc:  # tell the parent why, then die as a crash does
        with contextlib.suppress(Exception):
            conn.send(("crash", f"{type(exc).__name__}: {exc}"))
        raise
    conn.close()


class _LeasedRates(RateGate):
    """A worker's RPM/TPM: spends budget leased from the parent's buckets."""

    __slots__ = ("_client",)

    def __init__(self, client: _LeaseClient) -> None:
        super().__init__(None, None, 1.0)
        self._client = client

    def ready(self, tokens: int) -> bool:
        c = self._client
        return c.requests >= 1 and c.tokens >= tokens + self._debt

    async def take(self, tokens: int) -> None:
        c = self._client
        amount = tokens + self._debt
        self._debt = 0.0
        while c.requests < 1 or c.tokens < amount:
            await c.more_rates(1 if c.requests < 1 else 0, max(0.0, amount - c.tokens))
        c.requests -= 1
        c.tokens -= amount
        self.charged_tokens += tokens
        self.started += 1

    def settle(self, reserved: int, used: int) -> None:
        if used > reserved:
            self._debt += used - reserved
            self.charged_tokens += used - reserved


class _LeasedScheduler(Scheduler):
    """A worker's scheduler: dispatches only within the slots leased to it."""

    def __init__(self, *args: Any, client: _LeaseClient, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._client = client
        client.scheduler = self
        if client.rated:
            self._rates = _LeasedRates(client)

    def _place(self, ticket: Any) -> Any:
        c = self._client
        if c.slotted and self.in_flight >= c.slots:
            c.need_slots(self.waiting + 1)
            return None
        return self.router.choose(ticket, self.replicas)

    def release(self, grant: Any, **kw: Any) -> None:
        super().release(grant, **kw)
        self._client.released()


class _LeaseClient:
    """A worker's leases: slots and rate budget, and the messages that move them."""

    def __init__(self, run: _WorkerRun, config: dict[str, Any]) -> None:
        self._run = run
        self.slotted: bool = config["slots"]
        self.rated: bool = config["rates"]
        self.slot_batch: int = config["slot_batch"]
        self.slots: int = config["initial_slots"]
        self.owed = 0
        self._asked = 0  # slots asked for and not granted yet
        self._returning = False
        # Budget left; a limit the fleet does not have is never short.
        self.requests = 0 if config["rpm"] else 1 << 62
        self.tokens = 0.0 if config["tpm"] else float(1 << 62)
        self._rates_wait: asyncio.Future[None] | None = None
        self.scheduler: Scheduler | None = None

    def need_slots(self, n: int) -> None:
        if not self._asked:
            self._asked = max(1, min(n, self.slot_batch))
            self._run.send(("want_slots", self._asked))

    def granted_slots(self, n: int) -> None:
        self._asked = max(0, self._asked - n)
        self.slots += n
        if self.owed:
            self.released()
        if self.scheduler is not None:
            self.scheduler._kick()

    def reclaim(self, n: int) -> None:
        self.owed += n
        self.released()

    def spare(self, n: int) -> None:
        """The broker asks for slots this worker is not using: give back what is free
        now, if nothing waits here (nothing is owed)."""
        sched = self.scheduler
        if sched is None or sched.waiting:
            return
        give = min(n, self.slots - self.owed - sched.in_flight)
        if give > 0:
            self.slots -= give
            self._run.send(("return_spare", give))

    def released(self) -> None:
        """A stream ended (or slots were reclaimed): give owed slots back, once per loop
        iteration however many streams ended in it."""
        if self.owed and not self._returning:
            self._returning = True
            asyncio.get_running_loop().call_soon(self._give_back)

    def _give_back(self) -> None:
        self._returning = False
        if not self.owed or self.scheduler is None:
            return
        give = min(self.owed, self.slots - self.scheduler.in_flight)
        if give > 0:
            self.slots -= give
            self.owed -= give
            self._run.send(("return_slots", give))

    async def more_rates(self, requests: int, tokens: float) -> None:
        if self._rates_wait is None:
            self._rates_wait = asyncio.get_running_loop().create_future()
            self._run.send(("want_rates", requests, tokens))
        await asyncio.shield(self._rates_wait)

    def granted_rates(self, requests: int, tokens: float) -> None:
        self.requests += requests
        self.tokens += tokens
        fut, self._rates_wait = self._rates_wait, None
        if fut is not None and not fut.done():
            fut.set_result(None)


class _Forwarder:
    """The worker fleet's one callback: batches the events the parent wants."""

    def __init__(self, run: _WorkerRun, wanted: set[str]) -> None:
        self.event_types = frozenset(wanted)
        self._run = run
        self._batch: list[Event] = []
        self._timer: asyncio.TimerHandle | None = None

    def __call__(self, event: Event) -> None:
        self._batch.append(event)
        if len(self._batch) >= _BATCH_EVENTS:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_BATCH_S, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._batch:
            batch, self._batch = self._batch, []
            self._run.send(("events", _encode(batch)))


class _WorkerRun:
    """One worker's run: the sessions, its fleet, its pipe to the parent."""

    def __init__(
        self,
        conn: multiprocessing.connection.Connection,
        config: dict[str, Any],
        blobs: list[bytes],
    ) -> None:
        self.conn = conn
        self.config = config
        self.sessions: list[Session] = [pickle.loads(b) for b in blobs]
        self._lock = threading.Lock()
        self._status: asyncio.TimerHandle | None = None

    def send(self, msg: tuple[Any, ...]) -> None:
        with self._lock:
            try:
                self.conn.send(msg)
            except (OSError, ValueError):  # the parent is gone
                os._exit(0)

    async def main(self) -> None:
        from agentflow._fleet import Fleet, ReplicaStats

        config = self.config
        loop = asyncio.get_running_loop()
        client = _LeaseClient(self, config)
        forwarder = _Forwarder(self, config["wanted"])

        class _WorkerFleet(Fleet):
            def _new_scheduler(self) -> Scheduler:
                return _LeasedScheduler(
                    self.replicas,
                    policy=self.policy,
                    limits=Limits(),
                    router=self.router if self.router is not None else None,
                    clock=self._clock,
                    prefix_warmup=self.prefix_warmup,
                    client=client,
                )

        fleet = _WorkerFleet(
            config["replicas"],
            max_concurrency=1 << 30,
            max_tool_concurrency=config["max_tool_concurrency"],
            policy=config["policy"],
            retry=config["retry"],
            router=config["router"],
            prefix_warmup=config["prefix_warmup"],
            callbacks=[forwarder],
            freeze_gc=config["freeze_gc"],
        )
        task = loop.create_task(fleet.run(self.sessions))
        # SIGTERM (to the worker, or to the whole process group) ends its run in order:
        # its sessions end as cancelled and their results still reach the parent.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)

        def status() -> None:  # what Fleet.in_flight / queued read in the parent
            self.send(("status", fleet.in_flight, fleet.queued))
            self._status = loop.call_later(_STATUS_S, status)

        self._status = loop.call_later(_STATUS_S, status)

        def on_message(msg: Any) -> None:
            kind = msg[0]
            if kind == "slots":
                client.granted_slots(msg[1])
            elif kind == "reclaim":
                client.reclaim(msg[1])
            elif kind == "spare":
                client.spare(msg[1])
            elif kind == "rates":
                client.granted_rates(msg[1], msg[2])
            elif kind in ("cancel", "exit"):
                task.cancel()

        def gone() -> None:
            os._exit(0)  # the parent is gone: nothing to report to

        reader = threading.Thread(
            target=_read_worker_side, args=(self.conn, loop, on_message, gone), daemon=True
        )
        reader.start()
        stats: dict[str, Any] = {}
        try:
            result = await task
            stats = {
                "peak_in_flight": result.peak_in_flight,
                "retries": result.retries,
                "replicas": result.replicas,
            }
        except asyncio.CancelledError:
            pass  # its sessions ended as cancelled: their session_end events carry them
        finally:
            self._status.cancel()
            forwarder.flush()
            for t in fleet.replicas:
                with contextlib.suppress(Exception):
                    await t.transport.aclose()
        stats["replicas"] = [
            ReplicaStats(
                name=r.name,
                served=r.served,
                failures=r.failures,
                peak_in_flight=r.peak_in_flight,
                breaker_opened=r.breaker_opened,
                breaker_held=r.breaker_held,
            )
            for r in stats.get("replicas", [])
        ]
        self.send(("done", stats))


def _read_worker_side(
    conn: multiprocessing.connection.Connection,
    loop: asyncio.AbstractEventLoop,
    on_message: Callable[[Any], None],
    gone: Callable[[], None],
) -> None:
    try:
        while True:
            msg = conn.recv()
            loop.call_soon_threadsafe(on_message, msg)
    except RuntimeError:  # the worker's loop is closed: its run is over
        return
    except (EOFError, OSError, ValueError):  # the parent is gone
        gone()


_tokens_encoder = msgspec.msgpack.Encoder()
_tokens_decoder = msgspec.msgpack.Decoder(list[TokenEvent])


def _encode(batch: list[Event]) -> list[bytes | list[Event]]:
    """A batch as segments, in order: runs of token events as one msgpack blob each
    (a twentieth of pickle's cost per token), other events as they are (pickled with
    the message, an error that does not pickle replaced by its text)."""
    out: list[bytes | list[Event]] = []
    tokens: list[TokenEvent] = []
    others: list[Event] = []
    for event in batch:
        if isinstance(event, TokenEvent):
            if others:
                out.append(others)
                others = []
            tokens.append(event)
        else:
            if tokens:
                out.append(_tokens_encoder.encode(tokens))
                tokens = []
            others.append(_picklable(event))
    if tokens:
        out.append(_tokens_encoder.encode(tokens))
    if others:
        out.append(others)
    return out


def _decode(segments: list[bytes | list[Event]]) -> list[Event]:
    events: list[Event] = []
    for seg in segments:
        if isinstance(seg, bytes):
            events.extend(_tokens_decoder.decode(seg))
        else:
            events.extend(seg)
    return events


def _picklable(event: Event) -> Event:
    """The event, with an error that would not survive pickling replaced by a
    :class:`WorkerError` carrying its text."""
    if isinstance(event, ErrorEvent | AttemptDiscardedEvent):
        err = _safe_error(event.error)
        return event if err is event.error else replace(event, error=err)
    if isinstance(event, SessionEndEvent) and event.result.error is not None:
        err = _safe_error(event.result.error)
        if err is not event.result.error:
            return replace(event, result=replace(event.result, error=err))
    if isinstance(event, RetryEvent):
        try:
            pickle.loads(pickle.dumps(event))
        except Exception:  # its error is a TransportError: carried as its text
            return replace(
                event, attempt=replace(event.attempt, error=_carried(event.attempt.error))
            )
    return event


def _safe_error(error: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return WorkerError(f"{type(error).__name__}: {error}", worker=None, exitcode=None)
    return error


def _carried(error: TransportError) -> TransportError:
    return TransportError(f"{type(error).__name__}: {error}", endpoint=error.endpoint)
