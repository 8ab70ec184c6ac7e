"""A fleet queues a session as its first turn's ticket: no task until the turn is granted.

Issue 15: 10,000 queued sessions each held a task, a stack of coroutines and their
contexts before any of them could run. Now a session whose first turn needs nothing
to run first waits in the scheduler's heap as a ticket, and its task starts when the
scheduler grants that turn. These tests count what exists while sessions are queued,
and check that nothing a user sees changed: the order turns are dispatched in under
every shipped policy (compared with sessions that take the old path, each in its own
task from the start), results, events, cancellation and a failing policy.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from agentflow import (
    Agent,
    ErrorEvent,
    Event,
    Fleet,
    Session,
    SessionEndEvent,
    SessionResult,
    Tool,
    ToolCall,
    TurnEndEvent,
    TurnTrace,
)
from agentflow._event_bus import EventBus
from agentflow._fleet_run import run_in_process
from agentflow.sched import Ticket
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaSink

from .wait import GUARD_S

TURNS = 3  # per session: two tool rounds, then the answer


def _trace(endpoint: str, tool: bool) -> TurnTrace:
    calls = (ToolCall(index=0, id="call-0", name="noop", arguments="{}"),) if tool else ()
    return TurnTrace(
        endpoint=endpoint,
        model="m",
        response_id=None,
        sent_ns=0,
        headers_ns=0,
        end_ns=1_000,
        chunk_ns=(500,),
        chunk_chars=(2,),
        chunk_tokens=(1,),
        tokens_exact=True,
        n_events=1,
        content="" if tool else "done",
        reasoning="",
        tool_calls=calls,
        finish_reason="tool_calls" if tool else "stop",
        usage=None,
        done=True,
    )


class StepClock:
    """Time that moves 1 ms each time a request ends, and never otherwise: every
    time the fleet reads (ready, dispatched, released) follows from the order of the
    requests alone, so two runs that send in the same order read the same times."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class GatedTransport:
    """In process: records which session each request came from, in the order they were
    sent; streams one token, then holds the request until ``gate`` opens and answers
    with a one-chunk trace (a tool call until the session's last turn, then the answer)."""

    def __init__(self, gate: asyncio.Event | None = None, clock: StepClock | None = None) -> None:
        self.gate = gate
        self.clock = clock
        self.order: list[tuple[str, int]] = []
        self.in_flight = 0

    @property
    def endpoint(self) -> str:
        return "inproc://gated"

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        turn = sum(1 for m in request.messages if m["role"] == "assistant")
        self.order.append((request.headers.get("X-Session-ID", "?"), turn))
        self.in_flight += 1
        try:
            await asyncio.sleep(0)  # the first token comes a loop iteration later
            if sink is not None:
                sink.on_delta("content", "x", 0)
            if self.gate is not None:
                await self.gate.wait()
        finally:
            self.in_flight -= 1
            if self.clock is not None:
                self.clock.now += 1_000_000
        return _trace(self.endpoint, tool=turn < TURNS - 1)

    async def aclose(self) -> None:
        return None


async def noop() -> str:
    """Do nothing."""
    return "ok"


TOOL = Tool.from_function(noop, in_thread=False)


def agent(name: str = "a", priority: int = 0) -> Agent:
    return Agent(name=name, model="m", instructions="Be brief.", tools=[TOOL], priority=priority)


class EagerSession(Session):
    """A subclass with its own ``run``: the fleet runs it in its own task from the start
    (the path every session took before), the reference the lazy path is compared with."""

    async def run(self, *args: Any, **kwargs: Any) -> SessionResult:
        return await super().run(*args, **kwargs)


def session_tasks(ids: set[str]) -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() in ids]


async def settle(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_queued_session_has_no_task_until_its_turn_is_granted() -> None:
    """200 sessions, 4 slots: only the 4 granted sessions have a task; the other 196
    get theirs one by one as slots free, and all 200 finish, in order, with their turns."""
    gate = asyncio.Event()
    transport = GatedTransport(gate)
    writer = agent()
    sessions = [writer.session(f"task {i}") for i in range(200)]
    ids = {s.session_id for s in sessions}
    run = asyncio.create_task(Fleet(transport, max_concurrency=4).run(sessions))
    await settle()
    assert transport.in_flight == 4
    assert len(session_tasks(ids)) == 4
    assert sorted(sid for sid, _ in transport.order) == sorted(s.session_id for s in sessions[:4])
    gate.set()
    result = await run
    assert [r.session_id for r in result.sessions] == [s.session_id for s in sessions]
    assert all(r.ok and len(r.turns) == TURNS for r in result.sessions)
    assert len(transport.order) == 200 * TURNS
    assert session_tasks(ids) == []


async def test_a_queued_session_holds_a_few_tracked_objects() -> None:
    """Objects the garbage collector tracks per queued session (frozen ones included):
    the Session, its message and turn lists, its Ticket, its prompt estimate's running
    count, the scheduler's heap entry and the fleet's record of it — 7 (it was 58: a
    task, its coroutines, closures and contexts). Message dicts holding only strings are
    not tracked. Thousands of sessions made before any runs: what a run sets on a
    session used to be set too late to share its class's key table (CPython stops adding
    keys once many instances exist), one more dict per session."""
    gate = asyncio.Event()
    n = 2_000
    writer = agent()
    # A first run loads and caches what any run does, so that is not counted per session
    # (run alone, the test would otherwise divide those objects among its sessions).
    warm = asyncio.Event()
    warm.set()
    await Fleet(GatedTransport(warm), max_concurrency=4).run([writer.session("warm-up")])
    gc.collect()
    before = len(gc.get_objects()) + gc.get_freeze_count()

    class Queued(Session):
        """A class of its own: its instances' shared key table is new, whatever sessions
        earlier tests made (the test used to count 8.1 when its file ran alone)."""

    sessions = [Queued(writer, f"task {i}") for i in range(n)]
    run = asyncio.create_task(Fleet(GatedTransport(gate), max_concurrency=4).run(sessions))
    await settle()
    gc.collect()
    per_session = (len(gc.get_objects()) + gc.get_freeze_count() - before) / n
    gate.set()
    await run
    assert per_session <= 8, per_session


@pytest.mark.parametrize("policy", ["fcfs", "fair", "plas", "priority", "deadline"])
async def test_dispatch_order_is_the_same_as_with_a_task_per_session(policy: str) -> None:
    """Under every shipped policy, with two agents of different priorities and 2 slots,
    turns are sent in exactly the order they were when every session had its own task."""

    async def order(cls: type[Session]) -> list[tuple[str, int]]:
        clock = StepClock()
        transport = GatedTransport(clock=clock)
        agents = [agent("low"), agent("high", priority=1)]
        sessions = [cls(agents[i % 3 == 0], f"task {i}", session_id=f"s{i}") for i in range(40)]
        fleet = Fleet(transport, max_concurrency=2, policy=policy, clock=clock)
        result = await fleet.run(sessions)
        assert all(r.ok for r in result.sessions)
        return transport.order

    lazy, eager = await order(Session), await order(EagerSession)
    assert len(lazy) == 40 * TURNS
    assert lazy == eager


async def test_events_are_the_same_as_with_a_task_per_session() -> None:
    """The same events, per session in the same order, whichever path a session took."""

    async def events(cls: type[Session]) -> dict[str, list[tuple[str, int | None]]]:
        seen: list[Event] = []
        sessions = [cls(agent(), f"task {i}", session_id=f"s{i}") for i in range(30)]
        await Fleet(GatedTransport(), max_concurrency=3, callbacks=[seen.append]).run(sessions)
        out: dict[str, list[tuple[str, int | None]]] = {}
        for e in seen:
            sid = getattr(e, "session_id", None)
            if sid is not None:
                out.setdefault(sid, []).append((e.type, getattr(e, "turn", None)))
        return out

    lazy, eager = await events(Session), await events(EagerSession)
    assert lazy == eager
    assert lazy["s0"][-1] == ("session_end", None)
    assert [t for t, _ in lazy["s0"]].count("turn_end") == TURNS


async def test_cancelling_the_run_ends_queued_sessions_as_cancelled() -> None:
    """Cancelled while 196 sessions are queued: every session, started or not, ends
    ``cancelled`` with one SessionEndEvent, and no session task is left behind."""
    gate = asyncio.Event()
    ends: list[SessionEndEvent] = []
    sessions = [agent().session(f"task {i}") for i in range(200)]
    ids = {s.session_id for s in sessions}
    fleet = Fleet(
        GatedTransport(gate),
        max_concurrency=4,
        callbacks=[lambda e: ends.append(e) if isinstance(e, SessionEndEvent) else None],
    )
    run = asyncio.create_task(fleet.run(sessions))
    await settle()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert all(s.result is not None and s.result.status == "cancelled" for s in sessions)
    assert sorted(e.session_id for e in ends) == sorted(ids)
    assert session_tasks(ids) == []


async def test_a_session_granted_as_the_run_is_cancelled_still_ends_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run is cancelled in the loop pass that grants a queued session its first turn
    (here: just before the 6th grant), so its new task is cancelled before its first
    step and never runs the session: it still ends ``cancelled`` with its end event (it
    used to have no result at all, and its grant was never given back)."""
    from agentflow import _fleet_queued

    real = _fleet_queued._Queued.set_result
    grants = [0]
    run: asyncio.Task[Any] | None = None

    def set_result(self: Any, grant: Any, /) -> None:
        grants[0] += 1
        if grants[0] == 6 and run is not None:
            run.cancel()
        real(self, grant)

    monkeypatch.setattr(_fleet_queued._Queued, "set_result", set_result)
    gate = asyncio.Event()
    gate.set()
    ends: list[SessionEndEvent] = []
    sessions = [agent().session(f"task {i}") for i in range(12)]
    fleet = Fleet(
        GatedTransport(gate),
        max_concurrency=4,
        callbacks=[lambda e: ends.append(e) if isinstance(e, SessionEndEvent) else None],
    )
    run = asyncio.create_task(fleet.run(sessions))
    with pytest.raises(asyncio.CancelledError):
        await run
    assert grants[0] >= 6
    assert all(s.result is not None for s in sessions), [
        s.session_id for s in sessions if s.result is None
    ]
    assert sorted(e.session_id for e in ends) == sorted(s.session_id for s in sessions)


async def test_a_policy_that_raises_fails_its_sessions_not_the_run() -> None:
    """A policy that raises for one agent's tickets fails those sessions with its error
    (an ErrorEvent each), as it did when each session asked in its own task; the others
    complete."""

    def picky(ticket: Ticket, state: object) -> float:
        if ticket.agent == "bad":
            raise ValueError("no rank for bad")
        return float(ticket.ready_ns)

    errors: list[ErrorEvent] = []
    turns: list[TurnEndEvent] = []

    def keep(e: Event) -> None:
        if isinstance(e, ErrorEvent):
            errors.append(e)
        elif isinstance(e, TurnEndEvent):
            turns.append(e)

    sessions = [agent("bad" if i % 4 == 0 else "good").session(f"t{i}") for i in range(12)]
    result = await Fleet(GatedTransport(), max_concurrency=2, policy=picky, callbacks=[keep]).run(
        sessions
    )
    bad = [r for r in result.sessions if r.agent == "bad"]
    assert len(bad) == 3
    assert all(r.status == "error" and isinstance(r.error, ValueError) for r in bad)
    assert sorted(str(e.session_id) for e in errors) == sorted(r.session_id for r in bad)
    assert all(r.ok for r in result.sessions if r.agent == "good")
    assert len(turns) == 9 * TURNS


class LosesLease:
    """A run store's log (``TurnLog``) that finds one session's lease lost as its first
    turn is about to go, as the recorder raises ``LeaseLost`` there."""

    def __init__(self, lost: str) -> None:
        self.lost = lost

    def turn_starting(self, session: Session, turn: int) -> None:
        if session.session_id == self.lost:
            raise RuntimeError(f"lease of {self.lost} lost")

    def turn_finished(self, *args: object) -> None:
        return None

    def tool_finished(self, *args: object) -> None:
        return None

    def session_ended(self, *args: object) -> None:
        return None


async def test_a_queued_session_failing_before_its_send_gives_its_slot_back() -> None:
    """A queued session's task starts holding its first turn's slot; when its turn
    failed before the request went (the run store's lease lost), nothing gave the slot
    back, and with one slot the fleet hung. The session fails; the others complete."""
    sessions = [agent().session("Hi", session_id=f"s{i}") for i in range(3)]
    assert all(s._queues_lazily() for s in sessions)  # the path under test
    fleet = Fleet(GatedTransport(), max_concurrency=1)
    result = await asyncio.wait_for(
        run_in_process(fleet, sessions, EventBus(), LosesLease("s0")), GUARD_S
    )
    assert [(r.session_id, r.status) for r in result.sessions] == [
        ("s0", "error"),
        ("s1", "completed"),
        ("s2", "completed"),
    ]
    assert "lease of s0 lost" in str(result.sessions[0].error)
    assert fleet.in_flight == 0
