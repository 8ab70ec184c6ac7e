"""A run on virtual time, cut and resumed: each attempt takes up the run's time line where
the one before left it. Each attempt runs on a fresh ``VirtualTimeLoop`` (from 0), so the
wall clock says nothing of where its readings fall: placed through it, a resumed
attempt's turns overlapped the earlier attempts' (a session's next turn sent before its
previous one ended, the throughput of two attempts added up) or left an idle gap."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentflow import Agent, Event, FleetResult
from agentflow.embedded import SimTransport, run_virtual

from .fleets import after_turn_ends, driver, load_run, stored

#: How long each tool call takes, in virtual seconds: an attempt's readings run far
#: ahead of the wall clock.
TOOL_S = 30.0


async def fetch(key: str = "") -> str:
    """Fetch a key.

    Args:
        key: what to fetch.
    """
    await asyncio.sleep(TOOL_S)
    return f"value of {key!r}"


def _agents() -> list[Agent]:
    return [
        Agent(name=f"agent-{i}", model="sim", instructions="You fetch things.", tools=[fetch],
              params={"max_tokens": 32}, max_turns=8)
        for i in range(2)
    ]  # fmt: skip


async def _attempt(
    path: Path, cut_after: int | None, *, first: bool, events: list[Event] | None = None
) -> FleetResult | None:
    team = _agents()
    sessions = [team[i % 2].session(f"task {i}", session_id=f"s{i}") for i in range(4)]
    return await stored(
        path,
        SimTransport(driver()),
        (lambda f: f.run(sessions, run_id="run-1"))
        if first
        else (lambda f: f.resume("run-1", agents=team)),
        cut=after_turn_ends(cut_after),
        events=events,
        max_concurrency=2,
    )


def test_resumed_attempts_continue_the_time_line(tmp_path: Path) -> None:
    """Cut twice, resumed to the end: in the result every session's turns are in order
    (each sent after the one before ended), each attempt's turns come after all of the
    attempt's before it, and the last attempt starts where the one before left off (its
    last recorded turn's end): no overlap, no idle gap."""
    path = tmp_path / "run.db"
    assert run_virtual(_attempt(path, 6, first=True)) is None
    assert run_virtual(_attempt(path, 6, first=False)) is None
    events: list[Event] = []
    result = run_virtual(_attempt(path, None, first=False, events=events))
    assert result is not None
    run = asyncio.run(load_run(path))
    assert [a.attempt for a in run.attempts] == [0, 1, 2]
    attempt_of = {(s.session_id, t.turn): t.attempt for s in run.sessions for t in s.turns}

    spans: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
    for s in result.sessions:
        assert s.status == "completed", s.status
        for before, after in zip(s.turns, s.turns[1:], strict=False):
            assert after.trace.sent_ns >= before.trace.end_ns, (s.session_id, after.index)
        for t in s.turns:
            spans[attempt_of[s.session_id, t.index]].append((t.trace.sent_ns, t.trace.end_ns))
    assert all(spans.values()), spans
    for k in (1, 2):
        assert min(sent for sent, _ in spans[k]) >= max(end for _, end in spans[k - 1]), k
    # The result is on the last attempt's clock, as its fleet_start event is.
    (start,) = [e.start_ns for e in events if e.type == "fleet_start"]
    left_off = max(end for _, end in spans[1])
    assert 0 <= start - left_off < 1_000_000, start - left_off
