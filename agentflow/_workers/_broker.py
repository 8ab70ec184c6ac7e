"""The parent's broker: the fleet's limits, leased to the workers in batches.

A broker is built per run; the request and token buckets it leases are the fleet's,
kept across its runs (``sched/_carry.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentflow.sched import Limits
from agentflow.sched._carry import Carry

__all__ = ["Broker", "WorkerHandle"]


@dataclass(slots=True)
class WorkerHandle:
    """The parent's view of one worker: how to reach it, its sessions and state."""

    index: int
    sessions: list[int]  # indexes into the run's sessions
    #: Sends one message to the worker (over its pipe, or as a Ray actor call).
    send: Callable[[tuple[Any, ...]], None]
    process: Any = None  # multiprocessing.process.BaseProcess, for a worker process
    conn: Any = None  # multiprocessing.connection.Connection, for a worker process
    actor: Any = None  # ray.actor.ActorHandle, for a Ray actor
    reader: threading.Thread | None = None
    listener: asyncio.Task[None] | None = None
    done: asyncio.Future[dict[str, Any]] | None = None
    alive: bool = True
    crash: str = ""  # the last line of the traceback that ended it, if it sent one
    #: Why it was lost while it started (a Ray actor that died): its sessions may run
    #: again, and said when they fail after all.
    lost_why: str = ""
    #: The run loop's time when its last message arrived; ``None`` until its first one
    #: (while it starts, the heartbeat watchdog leaves it alone).
    heard: float | None = None
    #: The run loop's time when its channel opened (it was sent its sessions; a worker
    #: process's: when its start message began to go out, a send that may not end).
    opened: float | None = None
    #: What the watchdog did, if it killed it: "sent no heartbeat for 60 s and was killed"
    #: (the lead of its sessions' WorkerError), and why it was declared hung.
    hung: str = ""
    hung_why: str = ""
    #: Given up by a cancel (not stopped within ``stop_timeout_s``): killed, its sessions
    #: ended on the parent, and what it still sends but records is dropped.
    cut: bool = False


class Broker:
    """The fleet's limits, leased to workers in batches (parent side); its rate buckets
    are ``carry``'s (the fleet's, across its runs) when given."""

    def __init__(
        self,
        limits: Limits,
        workers: list[WorkerHandle],
        live: list[tuple[int, int]],
        carry: Carry | None = None,
    ) -> None:
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
        self.slot_batch = max(1, (self.cap or 1) // (2 * max(n, 1)))  # (none: empty run)
        # The fleet's buckets (``carry``), which span its runs: one batch per run stays
        # within the limits. New ones without (a broker built by hand).
        self._req, self._tok = (carry or Carry()).broker(limits)
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
                w.send(msg)

    def add_worker(self) -> None:
        """A worker started during the run (one that re-runs a lost one's sessions): it
        holds nothing and asks for what it needs."""
        self.held.append(0)
        self.reclaiming.append(0)

    # slots
    def want_slots(self, i: int, n: int) -> None:
        self.messages += 1
        give = min(n, self.free)
        if give > 0:
            self.free -= give
            self.held[i] += give
            self._send(i, ("slots", give))
            if give == n:
                return
            # The rest waits like any ask: the worker counts it as asked (LeaseClient
            # asks again only once it is granted), so a rest dropped here left free
            # slots unused while its tickets waited.
            n -= give
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
        ask arrives comes back; nothing is owed, so a busy worker keeps its slots.

        A worker that waits itself but had nothing queued is asked too (even with no
        spare slot): its ask is stale (the ticket it asked for went out, or was
        cancelled), and its answer (``return_spare``, sent only with nothing queued)
        withdraws it. Skipped, an idle worker holding every slot behind a stale ask was
        never asked for them, and the worker that waited for one waited for ever."""
        if not self.workers[j].alive or not any(k != j for k in self.pending):
            return
        in_flight, queued = self.live[j]
        spare = self.held[j] - in_flight - self.reclaiming[j]
        if queued == 0 and (spare > 0 or j in self.pending):
            self._send(j, ("spare", max(0, spare)))

    def returned(self, i: int, n: int, *, owed: bool = True) -> None:
        """Slots came back from worker ``i``: owed ones (a reclaim) or spare ones (an
        ``idle_check``; that answer also withdraws any ask of its own). Owed slots go
        first to the other workers that wait — the ones they were reclaimed for —
        and only then back to ``i``, whose own ask may have been queued earlier."""
        self.messages += 1
        self.held[i] -= n
        if owed:
            self.reclaiming[i] = max(0, self.reclaiming[i] - n)
        else:
            self.pending.pop(i, None)
        self.free += n
        self._serve_pending(last=i)

    def _serve_pending(self, last: int | None = None) -> None:
        order = [j for j in self.pending if j != last]
        if last in self.pending:
            order.append(last)
        for j in order:
            if self.free <= 0:
                break
            if self.reclaiming[j] > 0:  # it owes slots: what it gives back goes elsewhere
                continue
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
            # Exactly what the request about to go out needs, no spare: budget a worker
            # held on to would be sent later, on top of what the bucket refilled in the
            # meantime (an idle spell, then a burst over the limit's window bound).
            req = requests if self._req is not None else 0
            tok = tokens if self._tok is not None else 0.0
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
