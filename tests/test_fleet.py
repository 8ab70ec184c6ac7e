"""A fleet runs many sessions under one concurrency bound; callbacks never bring it down."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
from collections.abc import Awaitable, Callable

import pytest

from agentflow import (
    Agent,
    ConfigError,
    ErrorEvent,
    Event,
    Fleet,
    FleetEndEvent,
    FleetResult,
    HTTPTransport,
    TokenEvent,
)
from agentflow.testing import Reply, ScriptedServer

from .wait import GUARD_S

AGENT = Agent(name="writer", model="m")


def slow_text(text: str) -> Reply:
    return Reply(frames=Reply.text(text).frames, frame_delay_s=0.005)


async def test_concurrency_bound_holds_at_the_server() -> None:
    """With max_concurrency=3, the server sees at most 3 requests at once — and does see 3."""
    async with (
        ScriptedServer([slow_text(f"answer {i}") for i in range(20)]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await Fleet(t, max_concurrency=3).run(AGENT.session(f"q{i}") for i in range(20))
    assert srv.peak_in_flight == 3 and result.peak_in_flight == 3
    assert all(s.ok for s in result.sessions) and len(result.sessions) == 20
    assert result.output_tokens == 40 and result.output_tps > 0


async def test_queue_wait_is_measured() -> None:
    """A session that waited for a slot reports the wait; the first one does not wait."""
    async with (
        ScriptedServer([slow_text("a b c"), slow_text("d e f")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await Fleet(t, max_concurrency=1).run([AGENT.session("1"), AGENT.session("2")])
    # Ordered by the clock's own readings, never by wall-clock thresholds: with one slot,
    # the second request goes out only after the first stream ended, so its wait holds
    # the first turn's whole time on the wire, and the first waits less than that.
    first, second = sorted((s.turns[0] for s in result.sessions), key=lambda t: t.trace.sent_ns)
    assert second.trace.sent_ns >= first.trace.end_ns
    on_the_wire = (first.trace.end_ns - first.trace.sent_ns) / 1e9
    assert second.metrics.queue_wait_s >= on_the_wire - 1e-9 > 0
    assert first.metrics.queue_wait_s < second.metrics.queue_wait_s


async def test_raising_callbacks_are_reported_not_fatal() -> None:
    """Sync and async callbacks that raise are recorded and reported; every session completes."""
    seen: list[Event] = []

    def bad_sync(event: Event) -> None:
        if isinstance(event, TokenEvent):
            raise ValueError("sync boom")

    async def bad_async(event: Event) -> None:
        if event.type == "turn_end":
            raise KeyError("async boom")

    async with (
        ScriptedServer([Reply.text("x y"), Reply.text("z")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        fleet = Fleet(t, callbacks=[bad_sync, bad_async, seen.append])
        result = await fleet.run([AGENT.session("1"), AGENT.session("2")])
    assert all(s.ok for s in result.sessions)
    assert len([f for f in result.callback_errors if isinstance(f.error, ValueError)]) == 3
    assert len([f for f in result.callback_errors if isinstance(f.error, KeyError)]) == 2
    reported = [e for e in seen if isinstance(e, ErrorEvent) and e.where == "callback"]
    assert len(reported) == 5


async def test_async_callbacks_see_events_in_order() -> None:
    """One dispatcher feeds async callbacks: each session's tokens arrive in stream order."""
    texts: dict[str, str] = {}

    async def collect(event: Event) -> None:
        await asyncio.sleep(0)
        if isinstance(event, TokenEvent):
            texts[event.session_id] = texts.get(event.session_id, "") + event.text

    async with (
        ScriptedServer([Reply.text("a b c d"), Reply.text("e f g h")]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        result = await Fleet(t, callbacks=[collect]).run([AGENT.session("1"), AGENT.session("2")])
    assert sorted(texts.values()) == sorted(s.final_output or "" for s in result.sessions)


async def test_stream_yields_every_event_then_fleet_end() -> None:
    """`Fleet.stream` is an async iterator over events from FleetStartEvent to FleetEndEvent."""
    async with ScriptedServer([Reply.text("one two")]) as srv, HTTPTransport(srv.base_url) as t:
        events = [e async for e in Fleet(t).stream([AGENT.session("1")])]
    assert [e.type for e in events] == [
        "fleet_start",
        "token",
        "token",
        "turn_end",
        "session_end",
        "fleet_end",
    ]
    end = events[-1]
    assert isinstance(end, FleetEndEvent) and end.result.sessions[0].final_output == "one two"


async def test_leaving_the_stream_early_cancels_the_run() -> None:
    """Breaking out of `Fleet.stream` cancels the sessions and closes their connections."""
    long = Reply(frames=Reply.text(" ".join(["w"] * 200)).frames, frame_delay_s=0.01)
    async with ScriptedServer([long]) as srv, HTTPTransport(srv.base_url) as t:
        stream = Fleet(t).stream([AGENT.session("1")])
        async for event in stream:
            if event.type == "token":
                break
        await stream.aclose()
        for _ in range(100):
            if srv.client_disconnects:
                break
            await asyncio.sleep(0.02)
    assert srv.client_disconnects == 1


async def test_fleet_config_errors() -> None:
    """Bad bounds and reused sessions are ConfigErrors, raised before anything is sent."""
    with pytest.raises(ConfigError, match="max_concurrency"):
        Fleet(HTTPTransport("http://127.0.0.1:9/v1"), max_concurrency=0)
    s = AGENT.session("x", session_id="same")
    with pytest.raises(ConfigError, match="share session_id"):
        await Fleet(HTTPTransport("http://127.0.0.1:9/v1")).run(
            [s, AGENT.session("y", session_id="same")]
        )


async def test_callbacks_receive_only_the_event_types_they_declare() -> None:
    """A callback with `event_types` gets only those; no token events are built for it."""

    class TurnsOnly:
        event_types = frozenset({"turn_end"})

        def __init__(self) -> None:
            self.seen: list[str] = []

        def __call__(self, event: Event) -> None:
            self.seen.append(event.type)

    cb = TurnsOnly()
    async with ScriptedServer([Reply.text("one two")]) as srv, HTTPTransport(srv.base_url) as t:
        fleet = Fleet(t, callbacks=[cb])
        bus_probe: list[bool] = []
        fleet.subscribe(lambda e: bus_probe.append(isinstance(e, TokenEvent)))
        await fleet.run([AGENT.session("1")])
    assert cb.seen == ["turn_end"]
    assert any(bus_probe)  # an undeclared callback still reads everything, tokens included


async def test_the_heap_is_frozen_for_the_run_and_released_after() -> None:
    """Objects alive when a run starts, and the sessions' first steps, are kept out of
    full collections during it (a full pass would stall every stream at once); the
    collector is paused only while the sessions start, and all is handed back at the
    end. A freeze, or a disabled collector, that the application set up is left alone."""
    seen: list[tuple[int, bool]] = []

    def during(event: Event) -> None:
        seen.append((gc.get_freeze_count(), gc.isenabled()))

    async def run(freeze_gc: bool = True) -> None:
        seen.clear()
        async with ScriptedServer([Reply.text("a")]) as srv, HTTPTransport(srv.base_url) as t:
            await Fleet(t, callbacks=[during], freeze_gc=freeze_gc).run([AGENT.session("q")])

    await run()
    assert seen[0] == (seen[0][0], False) and seen[0][0] > 0  # FleetStartEvent: paused
    assert all(count > 0 and on for count, on in seen[1:])  # sessions started: running
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    await run(freeze_gc=False)
    assert set(seen) == {(0, True)}
    gc.freeze()
    gc.disable()
    try:
        mine = gc.get_freeze_count()
        await run()
        # (freed objects leave the frozen set, so the count can only shrink)
        assert all(0 < count <= mine and not on for count, on in seen)
        assert 0 < gc.get_freeze_count() <= mine and not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


async def test_what_a_run_keeps_is_frozen_as_it_goes() -> None:
    """While a run goes on, what it has kept is frozen once a second: a full collection
    walks only what is younger than that."""
    from agentflow._gcfreeze import Refreezer, frozen_gc

    kept: list[list[int]] = []
    with frozen_gc():
        refreezer = Refreezer(every_s=0.01)
        refreezer.start(asyncio.get_running_loop())
        await asyncio.sleep(0)
        before = gc.get_freeze_count()
        kept.append(list(range(10)))  # a tracked object made during the run
        await asyncio.sleep(0.05)
        assert gc.get_freeze_count() > before
        refreezer.stop()
    assert gc.get_freeze_count() == 0


async def test_a_second_run_at_once_is_refused_so_the_cap_holds() -> None:
    """max_concurrency is fleet-wide: a run, stream or resume on a fleet that is running
    one is a ConfigError (it would have a cap of its own: the server saw 4 with a cap of
    2); the first run is not disturbed, and once it ends the fleet runs again."""
    async with (
        ScriptedServer([slow_text(f"answer {i}") for i in range(8)]) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        fleet = Fleet(t, max_concurrency=2, probe_slots=False)
        first = asyncio.create_task(fleet.run(AGENT.session(f"x{i}") for i in range(6)))
        await asyncio.sleep(0)  # the first run has started
        with pytest.raises(ConfigError, match=r"Fleet\.run: this Fleet is already running"):
            await fleet.run([AGENT.session("y0")])
        with pytest.raises(ConfigError, match=r"Fleet\.stream: this Fleet is already running"):
            async for _ in fleet.stream([AGENT.session("y1")]):
                pass
        with pytest.raises(ConfigError, match=r"Fleet\.resume: this Fleet is already running"):
            await fleet.resume("r", agents=[AGENT])
        result = await first
        assert all(s.ok for s in result.sessions) and len(result.sessions) == 6
        assert srv.peak_in_flight == 2
        events = [e async for e in fleet.stream([AGENT.session("z0"), AGENT.session("z1")])]
        end = events[-1]
        assert isinstance(end, FleetEndEvent) and all(s.ok for s in end.result.sessions)
    assert srv.peak_in_flight == 2


async def test_a_stream_whose_run_fails_before_its_end_event_raises() -> None:
    """``Fleet.stream`` over sessions the run refuses (two with one id) raises the run's
    error; it waited for events forever."""
    session = AGENT.session("q")
    async with ScriptedServer([]) as srv, HTTPTransport(srv.base_url) as t:
        fleet = Fleet(t)

        async def drain() -> list[Event]:
            return [event async for event in fleet.stream([session, session])]

        with pytest.raises(ConfigError, match="session_id"):
            await asyncio.wait_for(drain(), GUARD_S)
        assert srv.requests == []


def test_a_tools_duration_leaves_out_its_wait_for_a_tool_slot() -> None:
    """Three sessions each call a 1 s tool at once, one tool slot: each call's
    ``duration_s`` is its 1 s, though they finish at 1, 2 and 3 s (it used to be 1, 2 and
    3 s, the wait for the slot counted as the tool's time). Virtual time: exact."""
    from agentflow import ToolResultEvent, tool
    from agentflow.embedded import loop_clock, run_virtual
    from agentflow.testing import capture_events

    @tool
    async def work(n: int) -> str:
        """Take exactly 1 s."""
        await asyncio.sleep(1.0)
        return f"done {n}"

    agent = Agent(name="a", model="m", tools=[work])
    replies = [Reply.tool_call("work", {"n": i}, call_id=f"c{i}") for i in range(3)]
    replies += [Reply.text("ok")] * 3
    events = capture_events("tool_result")

    async def main() -> float:
        async with (
            ScriptedServer(replies) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as t,
        ):
            loop = asyncio.get_running_loop()
            start = loop.time()
            fleet = Fleet(t, max_tool_concurrency=1, clock=loop_clock, callbacks=[events])
            result = await fleet.run(agent.session(f"s{i}") for i in range(3))
            assert all(s.ok for s in result.sessions), [s.error for s in result.sessions]
            return loop.time() - start

    elapsed = run_virtual(main())
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert len(results) == 3 and not any(e.is_error for e in results)
    assert [e.duration_s for e in results] == [1.0, 1.0, 1.0]
    assert elapsed >= 3.0  # the calls did wait for one another


def _logged(fn: Callable[[Event], Awaitable[None]]) -> Callable[[Event], Awaitable[None]]:
    """An ordinary decorator: a sync wrapper that returns the coroutine."""

    @functools.wraps(fn)
    def wrapper(event: Event) -> Awaitable[None]:
        return fn(event)

    return wrapper


async def test_an_async_callback_behind_a_plain_decorator_runs() -> None:
    """A ``functools.wraps`` wrapper around an ``async def`` is awaited on the
    dispatcher; it used to be called as a sync callback and its coroutine dropped, so it
    saw nothing and no error was reported."""
    seen: list[str] = []

    @_logged
    async def on_event(event: Event) -> None:
        await asyncio.sleep(0)
        seen.append(event.type)

    async with ScriptedServer([Reply.text("hello there")]) as srv, HTTPTransport(srv.base_url) as t:
        result = await Fleet(t, callbacks=[on_event]).run([AGENT.session("hi")])
    assert result.sessions[0].ok and not result.callback_errors
    assert seen[0] == "fleet_start" and "token" in seen and "session_end" in seen


async def test_a_sync_callback_returning_a_coroutine_is_a_callback_error() -> None:
    """A lambda around an ``async def`` cannot be seen through: the coroutine it returns
    is closed (it never runs, and does not warn) and reported as the callback's failure,
    on the token path and off it; it used to be dropped without a word."""
    ran: list[str] = []

    async def handle(event: Event) -> None:
        ran.append(event.type)

    def only_turns(event: Event) -> Awaitable[None]:
        return handle(event)

    wrapped_tokens = lambda event: handle(event)  # noqa: E731 - what the test is about
    only_turns.event_types = frozenset({"turn_end"})  # type: ignore[attr-defined]
    async with ScriptedServer([Reply.text("a b")]) as srv, HTTPTransport(srv.base_url) as t:
        result = await Fleet(t, callbacks=[wrapped_tokens, only_turns]).run([AGENT.session("x")])
    gc.collect()  # a coroutine left open would warn "never awaited" here (an error in tests)
    assert result.sessions[0].ok and ran == []
    failures = result.callback_errors
    assert {f.event.type for f in failures if f.callback is wrapped_tokens} >= {"token", "turn_end"}
    assert [f.event.type for f in failures if f.callback is only_turns] == ["turn_end"]
    assert all(isinstance(f.error, TypeError) for f in failures)
    assert "is sync but returned coroutine, which was never run" in str(failures[0].error)


def test_a_stalled_async_callback_cannot_hang_the_run() -> None:
    """An async callback that never returns (a post with no timeout) used to keep
    ``Fleet.run`` from returning. The end of the run waits ``callback_drain_s`` for it,
    then cancels the delivery; what was not delivered is in ``callback_errors``.
    Virtual time: the run ends exactly at the bound."""
    from agentflow.embedded import loop_clock, run_virtual

    cancelled: list[str] = []

    async def stuck(event: Event) -> None:
        if event.type == "session_end":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(event.type)
                raise

    async def main() -> tuple[float, FleetResult]:
        async with (
            ScriptedServer([Reply.text("hello")]) as srv,
            HTTPTransport(srv.base_url, kernel_timestamps=False) as t,
        ):
            loop = asyncio.get_running_loop()
            start = loop.time()
            fleet = Fleet(t, callbacks=[stuck], clock=loop_clock, callback_drain_s=5)
            result = await fleet.run([AGENT.session("hi")])
            return loop.time() - start, result

    elapsed, result = run_virtual(main())
    assert result.sessions[0].ok and cancelled == ["session_end"]
    assert 5.0 <= elapsed < 6.0
    failures = [(f.callback, f.event.type) for f in result.callback_errors]
    assert failures == [(stuck, "session_end"), (None, "fleet_end")]
    assert all(isinstance(f.error, TimeoutError) for f in result.callback_errors)
    assert "callback_drain_s=5 s" in str(result.callback_errors[0].error)


def test_the_callback_drain_waits_30_s_by_default_and_no_more_than_needed() -> None:
    """An :class:`EventBus` closes when its async callbacks have taken every event, or
    after 30 s; a slow callback that finishes in time loses nothing."""
    from agentflow._event_bus import EventBus
    from agentflow._events import FleetStartEvent
    from agentflow.embedded import run_virtual

    async def slow(event: Event) -> None:
        await asyncio.sleep(10)

    async def never(event: Event) -> None:
        await asyncio.sleep(3600)

    async def close_after(cb: Callable[[Event], Awaitable[None]]) -> tuple[float, int]:
        bus = EventBus([cb])
        for i in range(2):
            bus.emit(FleetStartEvent(sessions=1, start_ns=i))
        loop = asyncio.get_running_loop()
        start = loop.time()
        await bus.aclose()
        return loop.time() - start, len(bus.callback_errors)

    assert run_virtual(close_after(slow)) == (20.0, 0)
    assert run_virtual(close_after(never)) == (30.0, 2)  # it used to wait the hour

    from agentflow._event_bus import DEFAULT_CALLBACK_DRAIN_S

    assert DEFAULT_CALLBACK_DRAIN_S == 30.0
    for bad in (0, -1.0, float("nan"), True, "30"):
        with pytest.raises(ConfigError, match="callback_drain_s must be a number of seconds"):
            Fleet(HTTPTransport("http://127.0.0.1:9/v1"), callback_drain_s=bad)  # type: ignore[arg-type]


async def test_a_stream_left_under_aclosing_stops_its_run_at_once() -> None:
    """Leaving ``fleet.stream`` early inside ``contextlib.aclosing`` (as the docs say)
    cancels the run before the block ends: the fleet takes its next run at once, and the
    sessions left were cancelled."""
    sessions = [AGENT.session(f"task {i}") for i in range(4)]
    async with (
        # (a 10 s answer each: the sessions are still streaming when the loop is left)
        ScriptedServer(
            [Reply(frames=Reply.text(" ".join(["w"] * 1000)).frames, frame_delay_s=0.01)] * 4
            + [Reply.text("ok")]
        ) as srv,
        HTTPTransport(srv.base_url) as t,
    ):
        fleet = Fleet(t)
        async with contextlib.aclosing(fleet.stream(sessions)) as events:
            async for event in events:
                if event.type == "token":
                    break
        assert all(s.result is not None for s in sessions)
        assert any(s.result is not None and s.result.status == "cancelled" for s in sessions)
        again = await asyncio.wait_for(fleet.run([AGENT.session("y")]), GUARD_S)
    assert again.sessions[0].status == "completed"
