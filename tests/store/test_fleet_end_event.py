"""With a store, the fleet's start and end events describe the run, not the attempt: the
``FleetEndEvent`` carries the result ``Fleet.run``/``Fleet.resume`` return (its
``run_id``; a resumed run's every session and ``start_ns=None``), and a resumed run's
``FleetStartEvent`` counts all of its sessions."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from agentflow import Agent, Fleet, FleetEndEvent, FleetStartEvent
from agentflow.stats import FleetStats
from agentflow.store import SQLiteStore
from agentflow.testing import MockTransport, Reply, capture_events

AGENT = Agent(name="a", model="m")


def _fails_bad(req: Any) -> Reply:
    return Reply.error(400) if req.messages[-1]["content"] == "bad" else Reply.text("x")


async def test_the_end_event_carries_the_recorded_runs_result(tmp_path: Path) -> None:
    """A fresh recorded run: the event's result is the one returned, with the run's id."""
    async with SQLiteStore(tmp_path / "runs.db") as store:
        events = capture_events("fleet_start", "fleet_end")
        fleet = Fleet(MockTransport(_fails_bad), store=store, callbacks=[events])
        result = await fleet.run([AGENT.session("ok"), AGENT.session("bad")], run_id="r1")
        (end,) = events.of_type("fleet_end")
        assert isinstance(end, FleetEndEvent)
        assert end.result is result
        assert end.result.run_id == "r1"
        (start,) = events.of_type("fleet_start")
        assert isinstance(start, FleetStartEvent)
        assert start.sessions == 2 and end.result.start_ns == start.start_ns


async def test_stream_of_a_recorded_run_learns_its_id(tmp_path: Path) -> None:
    """``Fleet.stream`` has no return value: its last event is where the id is read."""
    async with SQLiteStore(tmp_path / "runs.db") as store:
        fleet = Fleet(MockTransport(lambda _: Reply.text("x")), store=store)
        last = None
        async for event in fleet.stream([AGENT.session("one")]):
            last = event
        assert isinstance(last, FleetEndEvent)
        assert last.result.run_id is not None
        assert [r.run_id for r in await store.runs()] == [last.result.run_id]


async def test_a_resumed_runs_events_describe_the_whole_run(tmp_path: Path) -> None:
    """Resuming a run with one failed session of two: the start event counts both, the
    end event's result is the one returned — both sessions, the run's id, no start."""
    async with SQLiteStore(tmp_path / "runs.db") as store:
        first = await Fleet(MockTransport(_fails_bad), store=store).run(
            [AGENT.session("ok", session_id="s0"), AGENT.session("bad", session_id="s1")]
        )
        assert [s.status for s in first.sessions] == ["completed", "error"]
        events = capture_events("fleet_start", "fleet_end")
        fleet = Fleet(MockTransport(lambda _: Reply.text("x")), store=store, callbacks=[events])
        result = await fleet.resume(first.run_id or "", agents=[AGENT])
        (start,) = events.of_type("fleet_start")
        assert isinstance(start, FleetStartEvent)
        assert start.sessions == 2
        (end,) = events.of_type("fleet_end")
        assert isinstance(end, FleetEndEvent)
        assert end.result is result
        assert end.result.run_id == first.run_id
        assert [(s.session_id, s.status) for s in end.result.sessions] == [
            ("s0", "completed"),
            ("s1", "completed"),
        ]
        assert end.result.start_ns is None


async def test_stats_of_a_resumed_run_span_its_own_attempt(tmp_path: Path) -> None:
    """The end event's result sums every attempt's wall time; a ``FleetStats`` subscribed
    to the resume sees this attempt's events only, so its duration (and every rate) is
    this attempt's — it used to take the run's wall time, 1,000 s of it the first
    attempt's here, and divide this attempt's tokens by it."""
    slow = itertools.count(step=1_000_000_000_000)  # 1,000 s a read: the first attempt
    async with SQLiteStore(tmp_path / "runs.db") as store:
        first = await Fleet(MockTransport(_fails_bad), store=store, clock=lambda: next(slow)).run(
            [AGENT.session("ok", session_id="s0"), AGENT.session("bad", session_id="s1")]
        )
        assert first.wall_s >= 1000
        stats = FleetStats()
        fleet = Fleet(MockTransport(lambda _: Reply.text("x")), store=store, callbacks=[stats])
        result = await fleet.resume(first.run_id or "", agents=[AGENT])
    assert result.wall_s >= 1000  # the run's: both attempts
    fleet_figures = stats.report()["fleet"]
    assert fleet_figures["turns"] == 1
    assert fleet_figures["duration_s"] < 1000  # this attempt's own span
