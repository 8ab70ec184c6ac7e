"""What a FleetResult keeps of time: the fleet's start (``FleetResult.start_ns``), the
origin ``FleetStats.from_result`` uses as a subscribed FleetStats does; and each session's
end (``SessionResult.end_ns``), so a row's status — that of the session that ended last —
is right without giving the stats the fleet's clock, in one process and merged.

Real fleets on the in-process simulator, in virtual time."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

from agentflow import Agent, Event, Fleet, FleetResult, FleetStartEvent
from agentflow.bench import SessionTemplate, SimTarget, Workload
from agentflow.bench._session import BenchRun, BenchSession
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.stats import FleetStats
from agentflow.store import SQLiteStore
from tests.stats.test_merge import assert_same

TINY = Workload(
    name="tiny",
    templates=(SessionTemplate(name="req", turns=2, prompt_tokens=8, output_tokens=4),),
)


def test_from_result_takes_the_fleet_start_as_its_origin() -> None:
    """Sessions that arrive 0.25 s, 0.5 s and 0.75 s after the fleet started: the first
    turn is ready 0.25 s after the start. from_result used that turn as the origin, so
    every time in its report was 0.25 s earlier than the subscribed report's."""

    async def main() -> tuple[FleetStats, FleetResult]:
        scripts = [TINY.sample(i, arrival_s=0.25 * (i + 1)) for i in range(3)]
        target = SimTarget(profile="cpu-tiny")
        live = FleetStats(per="session", bucket_s=0.1)
        async with target.open(scripts, 0) as transport:
            fleet = Fleet(transport, callbacks=[live], clock=target.clock())
            run = BenchRun(model="cpu-tiny", params={}, t0=asyncio.get_running_loop().time())
            result = await fleet.run([BenchSession(s, run) for s in scripts])
        return live, result

    live, result = run_virtual(main())
    assert result.start_ns is not None and result.start_ns == live.fleet_start_ns
    after = FleetStats.from_result(result, per="session", bucket_s=0.1)
    assert after.origin_ns == live.origin_ns == result.start_ns
    assert after.first_ns is not None and after.first_ns - result.start_ns == 250_000_000
    got, want = after.report(), live.report()
    assert [row["first_s"] for row in got["agents"]] == [0.25, 0.5, 0.75]
    # tool outcomes and compactions: not in a result (null), none seen live (0)
    want["fleet"].update(tool_s=None, tool_errors=None, compaction=None)
    want["fleet"]["errors"]["tool"] = None
    for row in want["agents"]:
        row.update(tool_s=None, tool_errors=None)
    assert_same(got, want)


async def wait_long() -> str:
    """Wait for two (virtual) seconds."""
    await asyncio.sleep(2.0)
    return "done"


def _two_workers() -> tuple[FleetStats, FleetStats, FleetStats, FleetResult, FleetResult]:
    """Two fleets ("workers") on one virtual clock, each with its own FleetStats given no
    clock, and one FleetStats subscribed to both ("one process"). Agent ``a`` on worker
    1: session s1's turn calls a tool at once, the tool takes 2 s, then ``max_turns``
    ends s1 (at ~2 s). On worker 2, from 0.5 s: s2 answers in one turn (ends at ~0.5 s)."""

    async def main() -> tuple[FleetStats, FleetStats, FleetStats, FleetResult, FleetResult]:
        one, w1, w2 = FleetStats(), FleetStats(), FleetStats()
        calls = Agent(name="a", model="sim", tools=[wait_long], max_turns=1)
        answers = Agent(name="a", model="sim")
        engines = [
            Engine("deepseek-v4.1-flash-gb300", seed=1, textgen=TextGenConfig(tool_rounds=r))
            for r in (1, 0)
        ]
        transports = [SimTransport(EngineDriver(e)) for e in engines]
        f1 = Fleet(transports[0], callbacks=[one, w1], clock=loop_clock)
        f2 = Fleet(transports[1], callbacks=[one, w2], clock=loop_clock)

        async def later() -> FleetResult:
            await asyncio.sleep(0.5)
            return await f2.run([answers.session("answer", session_id="s2")])

        try:
            r1, r2 = await asyncio.gather(f1.run([calls.session("call", session_id="s1")]), later())
        finally:
            for t in transports:
                await t.aclose()
        return one, w1, w2, r1, r2

    return run_virtual(main())


def test_a_row_shows_the_session_that_ended_last_without_the_clock() -> None:
    """s1 ended last (~2 s) though its last turn ended first: its row status is s1's, in
    one process, merged in either order, and from the results. Without the clock the
    stats knew a session's end only as the latest turn end seen: worker 1's was s1's
    turn (~0 s), worker 2's s2's (~0.5 s), so the merge showed s2's 'completed'."""
    one, w1, w2, r1, r2 = _two_workers()
    (s1,), (s2,) = r1.sessions, r2.sessions
    assert (s1.status, s2.status) == ("max_turns", "completed")
    assert s1.end_ns is not None and s2.end_ns is not None
    assert s1.turns[-1].trace.end_ns < s2.turns[-1].trace.end_ns <= s2.end_ns < s1.end_ns
    assert s1.end_ns - s1.turns[-1].trace.end_ns >= 2_000_000_000  # the tool's 2 s
    want = ("max_turns", "s1")
    (row,) = one.report()["agents"]
    assert (row["status"], row["session_id"]) == want
    for first, second in ((w1, w2), (w2, w1)):
        merged = copy.deepcopy(first)
        merged.merge(second)
        (row,) = merged.report()["agents"]
        assert (row["status"], row["session_id"]) == want
    both = FleetResult(sessions=[s1, s2], wall_s=2.5, peak_in_flight=1)
    (row,) = FleetStats.from_result(both).report()["agents"]
    assert (row["status"], row["session_id"]) == want
    parts = [FleetStats.from_result(r) for r in (r2, r1)]
    parts[0].merge(parts[1])
    (row,) = parts[0].report()["agents"]
    assert (row["status"], row["session_id"]) == want


def test_a_recorded_run_has_its_start_and_a_resumed_one_none(tmp_path: Path) -> None:
    """A fresh recorded run is one fleet run: its result has the fleet's start. A resumed
    run's sessions span its attempts (their wall times summed, not the time between
    them), so its start is not known, and from_result falls back to the first turn."""
    agent = Agent(name="a", model="sim", params={"max_tokens": 8})
    starts: list[int] = []

    def on_start(event: Event) -> None:
        if isinstance(event, FleetStartEvent):
            starts.append(event.start_ns)

    async def main() -> tuple[FleetResult, FleetResult]:
        transport = SimTransport(EngineDriver(Engine("deepseek-v4.1-flash-gb300", seed=2)))
        store = SQLiteStore(tmp_path / "runs.db")
        try:
            fleet = Fleet(transport, clock=loop_clock, store=store, callbacks=[on_start])
            await asyncio.sleep(1.0)  # the run starts at 1 s of virtual time
            fresh = await fleet.run([agent.session(f"task {i}") for i in range(2)])
            resumed = await fleet.resume(fresh.run_id or "", agents=[agent])
            return fresh, resumed
        finally:
            await store.aclose()
            await transport.aclose()

    fresh, resumed = run_virtual(main())
    assert fresh.start_ns == starts[0] == 1_000_000_000
    assert FleetStats.from_result(fresh).origin_ns == fresh.start_ns
    assert resumed.start_ns is None and len(resumed.sessions) == 2
    stats = FleetStats.from_result(resumed)
    assert stats.origin_ns == stats.first_ns
