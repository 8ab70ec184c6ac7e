"""A cancel that reaches the consumer of ``Fleet.stream`` (or the run's end) while the
run is shutting down is the consumer's: it is raised, never swallowed with the run's own.

``aclosing(fleet.stream(...))`` cancels the run and waits for it to end; a deadline, a
second Ctrl-C or a ``task.cancel()`` arriving during that wait used to be swallowed with
the run's cancellation: code past an ``asyncio.timeout`` ran on, with no ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib

from agentflow import Agent, Event, Fleet, HTTPTransport
from agentflow.embedded import loop_clock
from agentflow.sched import Limits, Replica, Scheduler
from agentflow.testing import Reply, ScriptedServer
from tests.sched.conftest import Acquirer, IdleTransport, settle, ticket

from .wait import GUARD_S

AGENT = Agent(name="a", model="m")


def _slow() -> Reply:
    # (a long answer: the sessions are still streaming when the consumer leaves)
    return Reply(frames=Reply.text(" ".join(["w"] * 1000)).frames, frame_delay_s=0.01)


async def test_a_cancel_while_the_stream_closes_its_run_is_raised() -> None:
    """The consumer leaves the stream under ``aclosing``; while the stream waits for its
    cancelled run to end (a session's end event, emitted as the run unwinds), the
    consumer's task is cancelled: it ends cancelled, and runs nothing past the stream."""
    box: dict[str, object] = {}

    def on_event(event: Event) -> None:
        # Fires while the run unwinds, i.e. while the stream's close waits for it.
        if event.type == "session_end" and box.get("closing") and "sent" not in box:
            box["sent"] = True
            consumer = box["consumer"]
            assert isinstance(consumer, asyncio.Task)
            consumer.cancel()

    async with (
        ScriptedServer([_slow()] * 2) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        fleet = Fleet(t, callbacks=[on_event])
        sessions = [AGENT.session("hi"), AGENT.session("ho")]

        async def consume() -> str:
            async with contextlib.aclosing(fleet.stream(sessions)) as events:
                async for event in events:
                    if event.type == "token":
                        box["closing"] = True
                        break
            box["past"] = True
            return "ran past the cancel"

        task = asyncio.create_task(consume())
        box["consumer"] = task
        done, _ = await asyncio.wait({task}, timeout=GUARD_S)
        assert done, "the consumer hung"
        assert box.get("sent"), "no session ended while the stream closed"
        assert task.cancelled(), task.result()
        assert "past" not in box
        assert all(s.result is not None and s.result.status == "cancelled" for s in sessions)


async def test_a_deadline_falling_due_as_the_stream_closes_raises_timeout_error() -> None:
    """The guide's pattern: ``asyncio.timeout`` around ``aclosing(fleet.stream(...))``.
    The deadline falls due while the stream closes its run (set to now by a session's
    end event): ``TimeoutError``, and the task is not left cancelling."""
    box: dict[str, object] = {}

    def on_event(event: Event) -> None:
        if event.type == "session_end" and box.get("closing") and "sent" not in box:
            box["sent"] = True
            # A deadline in the past expires on the loop's next step (``call_soon``):
            # before the run can end, which takes this session's task ending first.
            deadline = box["deadline"]
            assert isinstance(deadline, asyncio.Timeout)
            deadline.reschedule(asyncio.get_running_loop().time() - 1)

    async with (
        ScriptedServer([_slow()] * 2) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        fleet = Fleet(t, callbacks=[on_event])
        sessions = [AGENT.session("hi"), AGENT.session("ho")]
        ran_past = False
        timed_out = False
        try:
            async with asyncio.timeout(None) as deadline:
                box["deadline"] = deadline
                async with contextlib.aclosing(fleet.stream(sessions)) as events:
                    async for event in events:
                        if event.type == "token":
                            box["closing"] = True
                            break
                ran_past = True
        except TimeoutError:
            timed_out = True
        assert box.get("sent")
        assert timed_out and not ran_past
        me = asyncio.current_task()
        assert me is not None and me.cancelling() == 0


async def test_a_cancel_while_the_scheduler_stops_its_dispatcher_is_raised() -> None:
    """``Scheduler.aclose`` cancels its dispatcher and waits for it: a cancel of the
    caller's arriving meanwhile is raised (it used to be swallowed with the
    dispatcher's), and the queued ticket is still cancelled."""
    sched = Scheduler(
        [Replica(transport=IdleTransport())],
        limits=Limits(max_in_flight=1),
        clock=loop_clock,
        prefix_warmup=False,
    )
    first = await sched.acquire(ticket("s1"))
    queued = Acquirer(sched).submit(ticket("s2"))
    await settle()  # s2 queued: the dispatcher runs, waiting for a slot
    assert not queued.done()
    pump = sched._pump
    assert pump is not None
    closing = asyncio.create_task(sched.aclose())
    await asyncio.sleep(0)  # it cancelled the dispatcher and waits for it to end
    assert not closing.done()
    closing.cancel()  # ... and is cancelled meanwhile
    await asyncio.wait({closing}, timeout=GUARD_S)
    assert closing.cancelled()
    assert pump.cancelled()
    await asyncio.wait({queued}, timeout=GUARD_S)
    assert queued.cancelled()
    sched.release(first, used_tokens=None, ok=True)


async def test_a_cancel_requested_before_the_stream_closes_is_raised() -> None:
    """A cancel the consumer's task already has when the stream starts closing (a Ctrl-C
    during the loop's body: ``asyncio.run`` cancels its main task) is raised too; it was
    folded into the run's own cancellation and swallowed, the Ctrl-C lost."""
    box: dict[str, object] = {}
    async with (
        ScriptedServer([_slow()]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        fleet = Fleet(t)
        sessions = [AGENT.session("hi")]

        async def consume() -> str:
            async with contextlib.aclosing(fleet.stream(sessions)) as events:
                async for event in events:
                    if event.type == "token":
                        me = asyncio.current_task()
                        assert me is not None
                        me.cancel()  # requested now, delivered at the close's first wait
                        break
            box["past"] = True
            return "ran past the cancel"

        task = asyncio.create_task(consume())
        done, _ = await asyncio.wait({task}, timeout=GUARD_S)
        assert done, "the consumer hung"
        assert task.cancelled(), task.result()
        assert "past" not in box
        assert sessions[0].result is not None and sessions[0].result.status == "cancelled"


async def test_a_cancel_requested_before_the_scheduler_stops_is_raised() -> None:
    """The caller of ``Scheduler.aclose`` already has a cancel pending when it starts
    waiting for the dispatcher: raised once the dispatcher has ended (it was swallowed)."""
    sched = Scheduler(
        [Replica(transport=IdleTransport())],
        limits=Limits(max_in_flight=1),
        clock=loop_clock,
        prefix_warmup=False,
    )
    first = await sched.acquire(ticket("s1"))
    queued = Acquirer(sched).submit(ticket("s2"))
    await settle()
    pump = sched._pump
    assert pump is not None

    async def close() -> None:
        me = asyncio.current_task()
        assert me is not None
        me.cancel()  # pending: not delivered until the next wait
        await sched.aclose()

    closing = asyncio.create_task(close())
    await asyncio.wait({closing}, timeout=GUARD_S)
    assert closing.cancelled()
    assert pump.cancelled()
    await asyncio.wait({queued}, timeout=GUARD_S)
    assert queued.cancelled()
    sched.release(first, used_tokens=None, ok=True)
