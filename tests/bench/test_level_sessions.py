"""Every session a concurrency level runs is in the fleet's result: each slot's first and
the ones it ran after it (they used to be only in the events, so ``FleetResult.sessions``
and whatever was built from it — ``FleetStats.from_result``'s per-session rows — had one
session per slot)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agentflow import ConfigError, Fleet, FleetEndEvent, FleetResult
from agentflow._events import Event
from agentflow.bench import SessionTemplate, SimTarget, Workload
from agentflow.bench._level import LevelResult, LevelTap, run_level
from agentflow.bench._load import Load, session_stream
from agentflow.embedded import run_virtual
from agentflow.stats import FleetStats
from agentflow.store import SQLiteStore

#: Two-turn sessions with a tool wait between the turns.
AGENT = Workload(
    name="two-turn",
    templates=(
        SessionTemplate(
            name="agent", turns=2, prompt_tokens=16, output_tokens=10, tool_latency_s=0.1
        ),
    ),
)


def _level(
    load: Load, *, duration_s: float | None, max_sessions: int | None
) -> tuple[LevelResult, list[FleetResult]]:
    """One level on the simulator in virtual time, and the results its fleet's end
    events carried."""
    scripts = session_stream(AGENT, load, duration_s=duration_s, max_sessions=max_sessions)
    target = SimTarget(profile="cpu-tiny")
    ended: list[FleetResult] = []

    def on_end(event: Event) -> None:
        if isinstance(event, FleetEndEvent):
            ended.append(event.result)

    async def main() -> LevelResult:
        tap = LevelTap()
        async with target.open(scripts, 0) as transport:
            fleet = Fleet(transport, callbacks=[tap, on_end], clock=target.clock())
            return await run_level(
                fleet,
                tap,
                scripts,
                load=load,
                model="cpu-tiny",
                params={},
                duration_s=duration_s,
                clock=target.clock(),
            )

    return run_virtual(main()), ended


def _slots(result: FleetResult, heads: int) -> list[list[str]]:
    """The result's sessions, cut where each slot's first (``agent-0`` …) begins."""
    firsts = {f"agent-{i}" for i in range(heads)}
    out: list[list[str]] = []
    for s in result.sessions:
        if s.session_id in firsts:
            out.append([])
        out[-1].append(s.session_id)
    return out


def test_every_session_of_every_slot_is_in_the_result() -> None:
    level, ended = _level(Load(concurrency=2), duration_s=None, max_sessions=6)
    result = level.result
    assert result is not None and ended == [result]  # the end event's result is the same
    ids = [s.session_id for s in result.sessions]
    assert sorted(ids) == [f"agent-{i}" for i in range(6)]  # each once, none missing
    assert all(s.status == "completed" and len(s.turns) == 2 for s in result.sessions)
    # Each slot's first session is followed by those it ran, in the order they ran: each
    # was sent its first turn after the one before it had its last answer.
    by_id = {s.session_id: s for s in result.sessions}
    slots = _slots(result, 2)
    assert len(slots) == 2 and sum(map(len, slots)) == 6 and all(len(s) >= 2 for s in slots)
    for slot in slots:
        for a, b in itertools.pairwise(slot):
            assert by_id[a].turns[-1].trace.end_ns <= by_id[b].turns[0].trace.sent_ns
    # What is built from the result has them all: the per-session rows, the turns.
    report = FleetStats.from_result(result, per="session").report()
    assert sorted(row["session_id"] for row in report["agents"]) == sorted(ids)
    assert report["fleet"]["turns"] == 12 == level.summary["turns"]
    assert report["fleet"]["statuses"]["completed"] == 6


def test_a_level_cut_by_its_duration_has_every_started_session_in_the_result() -> None:
    """An endless stream, ended by the level's duration: each session that started (in
    every slot, the ones its end cut included) is in the result."""
    level, _ = _level(Load(concurrency=3), duration_s=2.0, max_sessions=None)
    assert level.result is not None
    started = len(level.run.starts)
    assert started > 3 * 2  # every slot ran several sessions
    assert len(level.result.sessions) == started == level.summary["sessions"]["started"]
    assert len({s.session_id for s in level.result.sessions}) == started


def test_a_concurrency_level_refuses_a_fleet_with_a_store(tmp_path: Path) -> None:
    """A run store records the sessions a run starts with: the ones a slot starts later
    were recorded as turns of sessions the run did not have."""
    load = Load(concurrency=2)
    scripts = session_stream(AGENT, load, duration_s=None, max_sessions=4)
    target = SimTarget(profile="cpu-tiny")

    async def main() -> None:
        tap = LevelTap()
        store = SQLiteStore(tmp_path / "runs.db")
        try:
            async with target.open(scripts, 0) as transport:
                fleet = Fleet(transport, callbacks=[tap], clock=target.clock(), store=store)
                await run_level(
                    fleet,
                    tap,
                    scripts,
                    load=load,
                    model="cpu-tiny",
                    params={},
                    duration_s=None,
                    clock=target.clock(),
                )
        finally:
            await store.aclose()

    with pytest.raises(ConfigError, match="run store records only the sessions a run starts"):
        run_virtual(main())
