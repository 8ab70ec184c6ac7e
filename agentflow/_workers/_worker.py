"""A worker process: its fleet on leased limits, its events batched to the parent."""

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from agentflow._events import Event
from agentflow._logging import get_logger
from agentflow._session import Session
from agentflow._turn_events import WATCH
from agentflow._workers._leased import LeaseClient, LeasedScheduler
from agentflow._workers._open_turns import OpenAttempts
from agentflow._workers._wire import encode
from agentflow.sched import Limits, Scheduler, TurnRunner

if TYPE_CHECKING:
    from agentflow.store import Store

__all__ = ["WorkerRun", "worker_entry"]

_log = get_logger("agentflow.workers")

_BATCH_EVENTS = 256
_BATCH_S = 0.005
#: How often a worker tells the parent its requests in flight and queued.
_STATUS_S = 0.25
_PR_SET_PDEATHSIG = 1
#: Set by a SIGTERM that came before the worker's loop could take it (while it imported
#: and unpickled its sessions): the run, once built, is cancelled at once.
_terminated = False


def _early_sigterm(signum: int, frame: object) -> None:
    global _terminated
    _terminated = True


def worker_entry(conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """A worker process: die with the parent, ignore the terminal's Ctrl-C (the parent
    stops the run in order), run the sessions it is sent."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _early_sigterm)
    try:
        msg = conn.recv()
    except (EOFError, OSError):
        os._exit(0)
    if msg[0] != "start":
        os._exit(1)
    lock = threading.Lock()
    # Set before the channel is closed at the run's end: the reader thread, which may be
    # inside conn.recv() then, ends quietly instead of taking it for the parent gone.
    closing = threading.Event()

    def send(msg: tuple[Any, ...]) -> None:
        with lock:
            try:
                conn.send(msg)
            except (OSError, ValueError):  # the parent is gone
                os._exit(0)

    def attach(loop: asyncio.AbstractEventLoop, on_message: Callable[[Any], None]) -> None:
        def gone() -> None:
            os._exit(0)  # the parent is gone: nothing to report to

        reader = threading.Thread(
            target=_read_worker_side,
            args=(conn, loop, on_message, gone, closing),
            daemon=True,
        )
        reader.start()

    try:
        asyncio.run(WorkerRun(msg[1], msg[2], send).main(attach, sigterm=True))
    except BaseException as exc:  # tell the parent why, then die as a crash does
        with contextlib.suppress(Exception):
            conn.send(("crash", f"{type(exc).__name__}: {exc}"))
        raise
    closing.set()
    conn.close()


class _Forwarder:
    """The worker fleet's callback: batches the events the parent wants. When it wants
    tokens, each batch also carries what changed of the sessions' open attempts
    (``attempts``, see ``_open_turns.py``)."""

    def __init__(self, run: WorkerRun, wanted: set[str]) -> None:
        self.event_types = frozenset(wanted)
        self._run = run
        self._batch: list[Event] = []
        self._timer: asyncio.TimerHandle | None = None
        self.attempts = OpenAttempts(self._wake) if "token" in wanted else None

    def __call__(self, event: Event) -> None:
        self._batch.append(event)
        if len(self._batch) >= _BATCH_EVENTS:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_BATCH_S, self.flush)

    def _wake(self) -> None:
        """An attempt's state changed with no event forwarded: sent with the next batch."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_BATCH_S, self.flush)

    def write(self, record: Any) -> None:
        """A store record (the sessions' turn log, see :class:`_Records`): sent at once,
        after the events before it, for the parent to write into its store."""
        self.flush()
        self._run.send(("records", [record]))

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # What changed of its sessions' open attempts: as of every token in this batch
        # or an earlier one (each is counted before it is forwarded), none later.
        changed = self.attempts.take() if self.attempts is not None else None
        if self._batch or changed:
            batch, self._batch = self._batch, []
            # With what the run has counted so far: a worker lost later keeps those.
            self._run.send(("events", encode(batch), self._run.counts(), changed))


def event_callbacks(forwarder: _Forwarder) -> list[Any]:
    """The worker fleet's callbacks: the open-attempt watch (when tokens are forwarded)
    first — a turn's end (or discard) that fills a batch flushes it, and the batch must
    carry the attempt's state after that event, not before — then the forwarder."""
    if forwarder.attempts is None:
        return [forwarder]
    return [forwarder.attempts, forwarder]


class _Records:
    """What a worker's sessions record, as a store would take it (``write``): a
    :class:`~agentflow.store._recorder.Recorder` builds the same records as in one
    process and this sends each to the parent, which owns the store."""

    def __init__(self, forwarder: _Forwarder) -> None:
        self.write = forwarder.write


class WorkerRun:
    """One worker's run: its sessions and its fleet on leased limits. The channel to the
    parent is the caller's: ``send`` takes each outgoing message, and :meth:`main` hands
    the handler of incoming ones to ``attach`` (a pipe's reader thread, or a Ray actor's
    method calls)."""

    def __init__(
        self,
        config: dict[str, Any],
        blobs: list[bytes],
        send: Callable[[tuple[Any, ...]], None],
    ) -> None:
        self.config = config
        self.sessions: list[Session] = [pickle.loads(b) for b in blobs]
        self.send = send
        self._status: asyncio.TimerHandle | None = None
        self._scheduler: Scheduler | None = None  # its fleet's, once the run started
        self._runner: TurnRunner | None = None

    def counts(self) -> dict[str, Any]:
        """What the run has counted so far — its peak in flight, its retries, each
        replica's :class:`~agentflow.ReplicaStats` — as its ``FleetResult`` has them at
        the end. Sent with every event batch and status, and at the end (``done``): the
        parent sums each worker's last (``{}`` before the run started)."""
        from agentflow._fleet import ReplicaStats

        scheduler, runner = self._scheduler, self._runner
        if scheduler is None:
            return {}
        return {
            "peak_in_flight": scheduler.peak_in_flight,
            "retries": runner.retries if runner is not None else 0,
            "replicas": [ReplicaStats.of(r) for r in scheduler.replicas],
        }

    async def main(
        self,
        attach: Callable[[asyncio.AbstractEventLoop, Callable[[Any], None]], None],
        *,
        sigterm: bool,
    ) -> None:
        """Run the sessions; tell the parent ``("done", stats)`` at the end. With
        ``sigterm``, a SIGTERM to this process cancels the run in order."""
        from agentflow._fleet import Fleet

        config = self.config
        run = self
        loop = asyncio.get_running_loop()
        client = LeaseClient(self, config)
        forwarder = _Forwarder(self, config["wanted"])

        class _WorkerFleet(Fleet):
            _probes_slots = False  # the parent asked the endpoints already

            def _new_scheduler(self) -> Scheduler:
                run._scheduler = LeasedScheduler(
                    self.replicas,
                    policy=self.policy,
                    limits=Limits(),
                    router=self.router if self.router is not None else None,
                    clock=self._clock,
                    prefix_warmup=self.prefix_warmup,
                    warmup_timeout_s=self.warmup_timeout_s,
                    client=client,
                )
                return run._scheduler

            def _new_runner(self, scheduler: Scheduler) -> TurnRunner:
                run._runner = super()._new_runner(scheduler)
                return run._runner

        fleet = _WorkerFleet(
            config["replicas"],
            max_concurrency=1 << 30,
            max_tool_concurrency=config["max_tool_concurrency"],
            policy=config["policy"],
            retry=config["retry"],
            router=config["router"],
            prefix_warmup=config["prefix_warmup"],
            warmup_timeout_s=config["warmup_timeout_s"],
            callbacks=event_callbacks(forwarder),
            freeze_gc=config["freeze_gc"],
        )
        record = config.get("record")
        if record is not None:  # the parent has a store: the sessions' turn log goes to it
            from agentflow.store._recorder import Recorder

            run_id, attempt = record
            recorder = Recorder(cast("Store", _Records(forwarder)), run_id, attempt)
            # Learnt calibrator state goes with session ends (at most every POLICY_EVERY_S).
            recorder.track_policies({id(s.agent): s.agent for s in self.sessions}.values())
            for s in self.sessions:
                s._log = recorder
        if forwarder.attempts is not None:  # the sessions' tasks register their turns
            WATCH.set(forwarder.attempts)
        task = loop.create_task(fleet.run(self.sessions))
        if sigterm:
            # SIGTERM (to the worker, or to the whole process group) ends its run in
            # order: its sessions end as cancelled and their results still reach the parent.
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signal.SIGTERM, task.cancel)
            if _terminated:  # a SIGTERM while the worker was starting
                task.cancel()

        def status() -> None:  # what Fleet.in_flight / queued read in the parent
            self.send(("status", fleet.in_flight, fleet.queued, self.counts()))
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

        attach(loop, on_message)
        try:
            await task
        except asyncio.CancelledError:
            pass  # its sessions ended as cancelled: their session_end events carry them
        finally:
            self._status.cancel()
            forwarder.flush()
            for t in fleet.replicas:
                with contextlib.suppress(Exception):
                    await t.transport.aclose()
        # Its counts whichever way the run ended (a cancelled one's too).
        self.send(("done", self.counts()))


def _read_worker_side(
    conn: multiprocessing.connection.Connection,
    loop: asyncio.AbstractEventLoop,
    on_message: Callable[[Any], None],
    gone: Callable[[], None],
    closing: threading.Event,
) -> None:
    """A worker's reader thread: each message from the parent to ``on_message`` on
    ``loop``, until the parent is gone (``gone``) or the worker closes ``conn`` at its
    run's end (``closing`` set first: a recv that fails then, with the handle closed
    under it — a TypeError, or an OSError — ends the thread quietly)."""
    try:
        while True:
            msg = conn.recv()
            loop.call_soon_threadsafe(on_message, msg)
    except RuntimeError:  # the worker's loop is closed: its run is over
        return
    except (EOFError, OSError, ValueError, TypeError):
        if not closing.is_set():  # the parent is gone
            gone()
