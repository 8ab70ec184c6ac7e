"""What the scheduling tests share: a fake clock, a trivial transport, tickets, and
simulator servers whose ground truth (arrivals, finishes, headers) tests count.

Nothing here is a mock: the transports are real :class:`~agentflow.typing.Transport`
implementations and the servers are the real simulator on loopback (or in process).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiohttp import web

from agentflow import Limits, Replica, TurnTrace
from agentflow.sched import CircuitBreaker, CircuitState, Grant, Router, Scheduler, Ticket
from agentflow.sim import Profile, SimServer, TextGenConfig
from agentflow.sim.faults import FAULT_HEADER
from agentflow.sim.records import RequestRecord
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaSink, Transport
from tests.sim.simhttp import QUICK

__all__ = [
    "QUICK",
    "Acquirer",
    "FakeClock",
    "Faulty",
    "IdleTransport",
    "RecordingSim",
    "max_in_window",
    "peak_overlap",
    "settle",
    "state",
    "ticket",
]

_NS = 1_000_000_000


class FakeClock:
    """A nanosecond clock that moves only when told to."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now = int(start_s * _NS)

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += int(seconds * _NS)


class IdleTransport:
    """A transport for scheduler tests that only need a named endpoint."""

    def __init__(self, name: str = "idle://0") -> None:
        self._name = name

    @property
    def endpoint(self) -> str:
        return self._name

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        raise AssertionError("the scheduler tests never stream")

    async def aclose(self) -> None:
        return None


class Faulty:
    """Forces simulator faults (the ``X-Agentflow-Fault`` header): attempt ``n`` of every
    turn gets ``faults[n]``, later attempts none — so with one fault, the retry succeeds.

    A turn is identified by its session (the ``X-Session-ID`` header the router adds)
    and the number of messages in its request.
    """

    def __init__(self, inner: Transport, *faults: str) -> None:
        self.inner = inner
        self.faults = faults
        self._attempts: dict[tuple[str, int], int] = {}
        #: Attempts sent with a fault header.
        self.faulted = 0

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        key = (request.headers.get("X-Session-ID", ""), len(request.messages))
        n = self._attempts.get(key, 0)
        self._attempts[key] = n + 1
        if n < len(self.faults):
            self.faulted += 1
            request = dataclasses.replace(
                request, headers={**request.headers, FAULT_HEADER: self.faults[n]}
            )
        return await self.inner.stream(request, sink)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One chat request as the simulator's HTTP layer received it."""

    headers: dict[str, str]
    body: dict[str, Any]
    status: int
    #: The server's loop time when it answered (virtual under run_virtual).
    at: float


class RecordingSim:
    """A :class:`SimServer` on loopback that also keeps, for the tests to count:

    - ``seen``: every chat request's headers and body, the status it was answered with
      and when (from aiohttp's ``on_response_prepare`` signal: the server's own view);
    - ``records``: every finished request's ground truth (arrival and finish on the
      engine clock, prompt tokens, ``max_tokens``).
    """

    def __init__(self, profile: Profile = QUICK, **kw: Any) -> None:
        kw.setdefault("textgen", TextGenConfig(tool_rounds=1, answer_tokens=(4, 8)))
        self.server = SimServer(profile, **kw)
        self.seen: list[Seen] = []
        self.records: list[RequestRecord] = []
        self.server.app.on_response_prepare.append(self._on_prepare)
        self.server.driver.add_finish_hook(self.records.append)

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.path != "/v1/chat/completions":
            return
        raw = await request.read()
        at = asyncio.get_running_loop().time()
        self.seen.append(Seen(dict(request.headers), json.loads(raw), response.status, at))

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def session_ids(self) -> set[str]:
        """The ``X-Session-ID`` values this server received (the name in any case: the
        OpenAI SDK's httpx sends it in lower case)."""
        return {v for s in self.seen for k, v in s.headers.items() if k.lower() == "x-session-id"}

    async def __aenter__(self) -> RecordingSim:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()


@pytest.fixture
async def sims() -> AsyncIterator[list[RecordingSim]]:
    """Three recording simulators (QUICK profile) on loopback; tests use what they need."""
    servers = [RecordingSim(seed=i) for i in range(3)]
    for s in servers:
        await s.server.start()
    try:
        yield servers
    finally:
        await asyncio.gather(*(s.server.stop() for s in servers))


def ticket(
    session_id: str = "s",
    agent: str = "a",
    *,
    ready_s: float = 0.0,
    prompt_tokens: int = 10,
    max_output_tokens: int = 10,
    priority: int = 0,
    deadline_s: float | None = None,
    prefix_key: str | None = None,
    attained_s: float = 0.0,
    turn: int = 0,
) -> Ticket:
    """A hand-built ticket (times in seconds)."""
    return Ticket(
        session_id=session_id,
        agent=agent,
        turn=turn,
        ready_ns=int(ready_s * _NS),
        prompt_tokens=prompt_tokens,
        max_output_tokens=max_output_tokens,
        priority=priority,
        deadline_ns=None if deadline_s is None else int(deadline_s * _NS),
        prefix_key=prefix_key,
        attained_ns=int(attained_s * _NS),
    )


def peak_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals open at once; one that ends when another starts does not overlap it."""
    events = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    peak = cur = 0
    for _, delta in events:  # at equal times the end (-1) sorts first
        cur += delta
        peak = max(peak, cur)
    return peak


def max_in_window(
    times: Sequence[float], window_s: float, weights: Sequence[float] | None = None
) -> float:
    """The largest total weight (default: count) of events in any closed window of ``window_s``."""
    order = sorted(range(len(times)), key=times.__getitem__)
    ts = [times[i] for i in order]
    ws = [1.0 if weights is None else weights[i] for i in order]
    prefix = [0.0]
    for w in ws:
        prefix.append(prefix[-1] + w)
    best = 0.0
    for i, t in enumerate(ts):
        j = bisect.bisect_right(ts, t + window_s)
        best = max(best, prefix[j] - prefix[i])
    return best


def state(breaker: CircuitBreaker) -> CircuitState:
    """The breaker's state, read fresh (a property that changes with the clock)."""
    return breaker.state


async def settle(rounds: int = 20) -> None:
    """Let every ready task (acquirers, the dispatcher) run until the loop is quiet."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Acquirer:
    """Acquires tickets on a real :class:`Scheduler`, each in its own task, and records
    the order grants come in."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        #: Session ids, in the order their tickets were granted.
        self.order: list[str] = []
        self.grants: dict[str, Grant] = {}
        self.tasks: dict[str, asyncio.Task[Grant]] = {}

    def submit(self, t: Ticket) -> asyncio.Task[Grant]:
        """Start acquiring ``t`` (runs at the next yield)."""

        async def go() -> Grant:
            grant = await self.scheduler.acquire(t)
            self.order.append(t.session_id)
            self.grants[t.session_id] = grant
            return grant

        task = asyncio.get_running_loop().create_task(go(), name=t.session_id)
        self.tasks[t.session_id] = task
        return task

    def release(self, session_id: str, *, ok: bool | None = True, used: int | None = None) -> None:
        """End the stream of ``session_id``'s grant."""
        self.scheduler.release(self.grants.pop(session_id), used_tokens=used, ok=ok)


def idle_replicas(slots: dict[str, int], **options: Any) -> list[Replica]:
    """Replicas on :class:`IdleTransport`, named by ``slots``' keys, each with that many
    in flight at most (``options``: more :class:`Replica` fields)."""
    return [
        Replica(transport=IdleTransport(name), limits=Limits(max_in_flight=n), name=name, **options)
        for name, n in slots.items()
    ]


async def warm_on_a_parked_on_b(sched: Scheduler, router: Router, acq: Acquirer) -> None:
    """Replica A (two slots) takes P0 and Q0 and has P and Q warm; P1 and Q1 then lead on
    B, and P2 and Q2 park behind them."""
    a = sched.replicas[0]
    for key in "PQ":
        router.pin(key, a)
        acq.submit(ticket(f"{key}0", prefix_key=key))
        await settle()
        sched.warmed(key, a)
    for name in ("P1", "P2", "Q1", "Q2"):
        acq.submit(ticket(name, prefix_key=name[0]))
        await settle()
