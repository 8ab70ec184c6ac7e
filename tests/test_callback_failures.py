"""A callback's failure is the callback's: recorded and reported, never the run's end —
nor, when it fails on every token, a cost per token."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from agentflow import Agent, ErrorEvent, Event, Fleet, FleetEndEvent, HTTPTransport
from agentflow._event_bus import CALLBACK_FAILURES_KEPT
from agentflow.stats import FleetStats
from agentflow.testing import Reply, ScriptedServer
from agentflow.typing import Callback

AGENT = Agent(name="writer", model="m")


async def _cancelled_await() -> None:
    """What a callback meets when a task it awaits (a webhook's request) was cancelled."""
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


async def test_a_callbacks_own_cancelled_error_is_its_failure_not_the_runs() -> None:
    """An async callback that raises a ``CancelledError`` of its own (not the run's
    cancellation) used to end the event dispatcher: later events went nowhere,
    ``Fleet.stream`` stopped early, and ``Fleet.run`` and ``Session.run`` raised
    ``CancelledError`` though every session completed. A sync callback raising one
    ended the sessions as cancelled. Now each is that callback's failure."""
    seen: list[str] = []

    async def hooked(event: Event) -> None:
        seen.append(event.type)
        if event.type == "turn_end":
            await _cancelled_await()

    def sync_hooked(event: Event) -> None:
        if event.type == "turn_end":
            raise asyncio.CancelledError

    async with (
        ScriptedServer([Reply.text("hello world")] * 6) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await Fleet(t, callbacks=[hooked, sync_hooked]).run(
            [AGENT.session("hi") for _ in range(2)]
        )
        assert [s.status for s in result.sessions] == ["completed", "completed"]
        failed = [(f.callback, f.event.type) for f in result.callback_errors]
        assert sorted(failed, key=str) == sorted(
            [(hooked, "turn_end")] * 2 + [(sync_hooked, "turn_end")] * 2, key=str
        )
        assert all(isinstance(f.error, asyncio.CancelledError) for f in result.callback_errors)
        assert seen.count("session_end") == 2 and "fleet_end" in seen

        alone = await AGENT.session("hi").run(t, callbacks=[hooked])
        assert alone.status == "completed"

        streamed = [e.type async for e in Fleet(t, callbacks=[hooked]).stream([AGENT.session("x")])]
        assert "session_end" in streamed and streamed[-1] == "fleet_end"


def test_a_cancelled_run_does_not_wait_for_a_stalled_async_callback() -> None:
    """Cancelling a run (a timeout around it, SIGTERM, Ctrl-C) while an async callback
    was stalled used to wait the whole ``callback_drain_s`` (30 s by default) for it.
    Now the delivery is cancelled at once. Virtual time: the old code's wait shows as
    the drain's 5 s; the run is cancelled by an event, not a timer."""
    from agentflow.embedded import loop_clock, run_virtual

    stuck_at: list[str] = []

    async def stalled(event: Event) -> None:
        if event.type == "fleet_start" or event.type == "turn_end":
            stuck_at.append(event.type)
            await asyncio.Event().wait()

    async def cancelled_at_first_turn(
        run: Callable[[Callback], Coroutine[Any, Any, object]],
    ) -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        task: asyncio.Task[object] | None = None

        def cancel(event: Event) -> None:
            if event.type == "turn_end" and task is not None:
                task.cancel()

        task = asyncio.create_task(run(cancel))
        with pytest.raises(asyncio.CancelledError):
            await task
        return loop.time() - start

    async def main() -> tuple[float, float]:
        async with (
            ScriptedServer([Reply.text("hello")] * 2) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as t,
        ):
            fleet = await cancelled_at_first_turn(
                lambda cancel: Fleet(
                    t, callbacks=[stalled, cancel], clock=loop_clock, callback_drain_s=5
                ).run([AGENT.session("hi")])
            )
            alone = await cancelled_at_first_turn(
                lambda cancel: AGENT.session("hi").run(
                    t, callbacks=[stalled, cancel], clock=loop_clock
                )
            )
            return fleet, alone

    fleet, alone = run_virtual(main())
    assert stuck_at == ["fleet_start", "turn_end"]
    assert fleet < 5.0 and alone < 30.0  # the drains: 5 s, and Session.run's 30 s


def test_a_cancelled_runs_undelivered_events_are_recorded() -> None:
    """What the cancelled delivery did not hand over is in ``callback_errors`` (a
    ``CancelledError`` each, the stalled callback named on the event it was stuck in)."""
    from agentflow._event_bus import EventBus
    from agentflow._events import FleetStartEvent
    from agentflow.embedded import run_virtual

    async def never(event: Event) -> None:
        await asyncio.Event().wait()

    async def main() -> tuple[float, EventBus]:
        bus = EventBus([never])
        bus.emit(FleetStartEvent(sessions=1, start_ns=0))
        bus.emit(FleetStartEvent(sessions=1, start_ns=1))
        await asyncio.sleep(0)  # the dispatcher takes the first
        loop = asyncio.get_running_loop()
        start = loop.time()
        await bus.aclose(cancelled=True)
        return loop.time() - start, bus

    elapsed, bus = run_virtual(main())
    assert elapsed == 0.0
    failures = [(f.callback, getattr(f.event, "start_ns", None)) for f in bus.callback_errors]
    assert failures == [(never, 0), (None, 1)]
    assert all(isinstance(f.error, asyncio.CancelledError) for f in bus.callback_errors)
    assert "2 event(s) not delivered" in str(bus.callback_errors[0].error)


class _Printer:
    """A token printer with a bug: it raises on every token."""

    event_types = frozenset({"token"})

    def __call__(self, event: Event) -> None:
        raise KeyError("oops")


async def test_a_callback_failing_on_every_token_is_only_counted_after_ten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each failure used to be kept with its traceback (its frames: ~2.4 KB a token),
    logged and reported by an ``ErrorEvent``: 100k tokens took 305 MB and 9x the time.
    Now a callback's first 10 failures are (only the first keeps its traceback), and
    the rest are counted in ``callback_errors_dropped``, logged at 11, 100, 1000."""
    caplog.set_level(logging.WARNING, logger="agentflow")
    printer = _Printer()
    reported: list[Event] = []

    def on_error(event: Event) -> None:
        reported.append(event)

    on_error.event_types = frozenset({"error"})  # type: ignore[attr-defined]
    reply = Reply.text(" ".join(["w"] * 500))
    async with ScriptedServer([reply, reply]) as srv, HTTPTransport(srv.base_url) as t:
        result = await Fleet(t, callbacks=[printer, on_error]).run(
            [AGENT.session("a"), AGENT.session("b")]
        )
    assert all(s.ok for s in result.sessions)
    assert [f.callback for f in result.callback_errors] == [printer] * CALLBACK_FAILURES_KEPT
    assert result.callback_errors_dropped == 1000 - CALLBACK_FAILURES_KEPT
    first, *later = (f.error for f in result.callback_errors)
    assert first.__traceback__ is not None and all(e.__traceback__ is None for e in later)
    assert len(reported) == CALLBACK_FAILURES_KEPT
    logged = [r.getMessage() for r in caplog.records if r.name == "agentflow.events"]
    assert sum("callback.failed" in m for m in logged) == CALLBACK_FAILURES_KEPT
    assert [m.split("failures=")[1].split()[0] for m in logged if "callback.failing" in m] == [
        "11",
        "100",
        "1000",
    ]
    assert FleetStats.from_result(result).callback_errors == 1000


async def test_an_async_callback_failing_on_fleet_end_leaves_no_task_behind() -> None:
    """An async callback that fails on ``fleet_end`` fails while the run's end drains
    the events: its ``ErrorEvent`` used to start a new dispatcher task that nothing
    closed, one left behind per run. Sync callbacks still get that ``ErrorEvent``; the
    async ones never will, and the result says so."""
    got: list[Event] = []

    async def bad(event: Event) -> None:
        if event.type == "fleet_end":
            raise ValueError("boom on fleet_end")

    async with (
        ScriptedServer([Reply.text("hello world")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await Fleet(t, callbacks=[bad, got.append]).run([AGENT.session("hi")])
    for _ in range(5):  # a leaked dispatcher would be scheduled by now (it never ends)
        await asyncio.sleep(0)
    dispatchers = [
        task for task in asyncio.all_tasks() if "EventBus._dispatch" in repr(task.get_coro())
    ]
    assert dispatchers == []
    assert result.sessions[0].ok
    (reported,) = [e for e in got if isinstance(e, ErrorEvent)]
    assert reported.where == "callback" and isinstance(reported.error, ValueError)
    assert [(f.callback, f.event.type, type(f.error)) for f in result.callback_errors] == [
        (bad, "fleet_end", ValueError),
        (None, "error", RuntimeError),
    ]


async def test_a_stuck_async_callback_does_not_hold_fleet_stream_back() -> None:
    """``Fleet.stream``'s consumer used to get each event only after every async callback
    had taken it: behind a stuck one it got nothing, and when the run's end gave up
    waiting (``callback_drain_s``) it lost them all, ``fleet_end`` included. Now the
    stream is fed as events happen; the stuck callback's events are recorded as not
    delivered to it, as before."""

    async def stuck(event: Event) -> None:
        await asyncio.Event().wait()

    async with (
        ScriptedServer([Reply.text("hello world")] * 2) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        fleet = Fleet(t, callbacks=[stuck], callback_drain_s=0.01)
        streamed = [e async for e in fleet.stream([AGENT.session("a"), AGENT.session("b")])]
    types = [e.type for e in streamed]
    assert types[0] == "fleet_start" and types[-1] == "fleet_end"
    assert types.count("session_end") == 2 and types.count("turn_end") == 2
    end = streamed[-1]
    assert isinstance(end, FleetEndEvent)
    undelivered = [(f.callback, f.event.type) for f in end.result.callback_errors]
    assert undelivered[0] == (stuck, "fleet_start")
    assert [t for _, t in undelivered] == types


async def test_a_sync_callbacks_failure_is_reported_after_the_event_it_is_about() -> None:
    """A sync callback that raised had its ``ErrorEvent`` emitted at once: the async
    consumers (``Fleet.stream``, async callbacks) got it before the event it was about,
    and the sync callbacks after the failing one got it before that event too. Now it
    follows the event, for everyone."""
    sync_seen: list[str] = []
    async_seen: list[str] = []

    def bad(event: Event) -> None:
        if event.type == "turn_end":
            raise ValueError("boom")

    def after(event: Event) -> None:
        sync_seen.append(event.type)

    async def later(event: Event) -> None:
        async_seen.append(event.type)

    async with ScriptedServer([Reply.text("hello")]) as srv, HTTPTransport(srv.base_url) as t:
        fleet = Fleet(t, callbacks=[bad, after, later])
        streamed = [e.type async for e in fleet.stream([AGENT.session("a")])]
    for seen in (sync_seen, async_seen, streamed):
        assert seen.index("error") == seen.index("turn_end") + 1, seen
    # Sync callbacks only: tokens go to them directly (TurnEvents), not through emit.
    tokens_then: list[str] = []

    def bad_token(event: Event) -> None:
        if event.type == "token":
            raise ValueError("boom")

    async with ScriptedServer([Reply.text("hello")]) as srv, HTTPTransport(srv.base_url) as t:
        await Fleet(t, callbacks=[bad_token, lambda e: tokens_then.append(e.type)]).run(
            [AGENT.session("a")]
        )
    assert tokens_then.index("error") == tokens_then.index("token") + 1, tokens_then
