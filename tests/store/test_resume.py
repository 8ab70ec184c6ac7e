"""Resuming a stopped run: it ends as an uninterrupted run would have, finished turns are
not redone, recorded tool calls never run again, and the agents must be the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet, FleetResult, StoreError, tool
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.store import SQLiteStore, _durable

from .fleets import after_turn_ends, agents, contents, driver, resume, run_cut, stored

N = 24


def _sessions(team: list[Agent]) -> list[Any]:
    return [team[i % len(team)].session(f"task {i}", session_id=f"s{i:02d}") for i in range(N)]


async def _fleet_run(
    path: Path, team: list[Agent], stop_after_turns: int | None
) -> FleetResult | None:
    """Run the fleet; with ``stop_after_turns``, cancel it after that many turn ends
    (``None`` is returned then)."""
    return await stored(
        path,
        SimTransport(driver()),
        lambda fleet: fleet.run(_sessions(team), run_id="run-1"),
        cut=after_turn_ends(stop_after_turns),
        max_concurrency=6,
    )


async def _resume(path: Path, team: list[Agent]) -> FleetResult:
    result = await stored(
        path,
        SimTransport(driver()),
        lambda fleet: fleet.resume("run-1", agents=team),
        max_concurrency=6,
    )
    assert result is not None
    return result


@pytest.mark.parametrize("stop_after", [1, 17, 40])
def test_a_cancelled_run_resumes_to_the_same_transcripts(tmp_path: Path, stop_after: int) -> None:
    """Cancel after some turns, resume: every session's messages equal an uninterrupted
    run's, the store holds the same rows, and the result has every session's turns."""
    whole = run_virtual(_fleet_run(tmp_path / "whole.db", agents(), None))
    assert isinstance(whole, FleetResult)
    cut = tmp_path / "cut.db"
    assert run_virtual(_fleet_run(cut, agents(), stop_after)) is None
    partial = contents(cut, "run-1")
    assert 0 < len(partial["turns"]) < sum(len(s.turns) for s in whole.sessions)
    resumed = run_virtual(_resume(cut, agents()))
    assert [s.session_id for s in resumed.sessions] == [s.session_id for s in whole.sessions]
    for a, b in zip(whole.sessions, resumed.sessions, strict=True):
        assert b.status == "completed", (b.session_id, b.error)
        assert b.messages == a.messages
        assert [t.index for t in b.turns] == list(range(len(a.turns)))
    assert contents(cut, "run-1") == contents(tmp_path / "whole.db", "run-1")
    # The turns recorded before the cut are still those rows (not re-recorded).
    after = {(r[0], r[1]): r for r in contents(cut, "run-1")["turns"]}
    assert all(after[r[0], r[1]] == r for r in partial["turns"])


def test_resume_needs_the_same_agents(tmp_path: Path) -> None:
    """A changed agent is a ConfigError naming it; a missing one too."""
    path = tmp_path / "cut.db"
    run_virtual(_fleet_run(path, agents(), 5))
    changed = agents()
    changed[1] = Agent(
        name="agent-1", model="sim", instructions="Something else.", tools=changed[1].tools
    )
    with pytest.raises(ConfigError, match="'agent-1'"):
        run_virtual(_resume(path, changed))
    with pytest.raises(ConfigError, match="'agent-2'"):
        run_virtual(_resume(path, agents()[:2]))


def test_a_finished_run_resumes_to_itself_without_a_request(tmp_path: Path) -> None:
    """Resuming a finished run runs nothing and returns every session as recorded."""
    path = tmp_path / "runs.db"
    whole = run_virtual(_fleet_run(path, agents(), None))
    assert isinstance(whole, FleetResult)
    before = contents(path, "run-1")

    result = run_virtual(_resume(path, agents()))
    assert [s.messages for s in result.sessions] == [s.messages for s in whole.sessions]
    assert sum(r.served for r in result.replicas) == 0  # no model request was sent
    # (its peak in flight is the whole run's, as recorded: at most the live one)
    assert 0 < result.peak_in_flight <= whole.peak_in_flight
    assert contents(path, "run-1") == before


def test_only_the_unrecorded_tool_calls_of_a_turn_run_again(tmp_path: Path) -> None:
    """A turn asked for two calls; one result was recorded, the other call was still
    running when the run stopped. On resume only the second runs; the first's recorded
    output is what the model sees."""
    runs: list[str] = []
    gate = asyncio.Event()

    @tool
    async def fast(key: str) -> str:
        """Answer at once."""
        runs.append(f"fast {key}")
        return f"fast {key}"

    @tool
    async def slow(key: str) -> str:
        """Answer once the gate opens."""
        runs.append(f"slow {key}")
        await gate.wait()
        return f"slow {key}"

    agent = Agent(
        name="a", model="sim", tools=[fast, slow], max_turns=4, params={"max_tokens": 800}
    )
    path = tmp_path / "runs.db"

    async def first() -> None:
        from agentflow.sim import Engine, TextGenConfig
        from agentflow.sim.driver import EngineDriver

        engine = Engine(
            "deepseek-v4.1-flash-gb300",
            seed=11,
            textgen=TextGenConfig(tool_rounds=1, answer_tokens=(4, 8), tool_calls_per_turn=(6, 6)),
        )
        transport = SimTransport(EngineDriver(engine))
        store = SQLiteStore(path)
        fleet = Fleet(transport, clock=loop_clock, store=store)
        task = asyncio.ensure_future(fleet.run([agent.session("go", session_id="s")], run_id="r"))

        async def stop_when_slow_runs() -> None:
            for _ in range(100_000):  # a hang guard, in virtual time
                if any(r.startswith("slow") for r in runs) and any(
                    r.startswith("fast") for r in runs
                ):
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"the turn never ran both tools: {runs}")
            task.cancel()

        await stop_when_slow_runs()
        with pytest.raises(asyncio.CancelledError):
            await task
        await store.aclose()
        await transport.aclose()

    run_virtual(first())
    rows = contents(path, "r")
    recorded = {r[4]: r[3] for r in rows["tools"]}
    assert recorded and all(name == "fast" for name in recorded.values())
    first_runs = list(runs)
    runs.clear()
    gate.set()

    async def second() -> FleetResult:
        from agentflow.sim import Engine, TextGenConfig
        from agentflow.sim.driver import EngineDriver

        engine = Engine(
            "deepseek-v4.1-flash-gb300",
            seed=11,
            textgen=TextGenConfig(tool_rounds=1, answer_tokens=(4, 8), tool_calls_per_turn=(6, 6)),
        )
        transport = SimTransport(EngineDriver(engine))
        store = SQLiteStore(path)
        try:
            return await Fleet(transport, clock=loop_clock, store=store).resume("r", agents=[agent])
        finally:
            await store.aclose()
            await transport.aclose()

    result = run_virtual(second())
    (session,) = result.sessions
    assert session.ok, session.error
    assert all(r.startswith("slow") for r in runs)  # the recorded fast calls did not run again
    assert len(runs) == sum(r.startswith("slow") for r in first_runs)
    assert len(session.turns) == 2
    tool_msgs = [m for m in session.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 6
    assert [m["role"] for m in session.messages].count("assistant") == 2


def test_a_resume_rides_out_a_store_it_cannot_ask_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses the resume's first lease claim and its first lease release (a
    lost PostgreSQL connection, say): the sessions ask again at the next tick, and the
    release is the attempt end's, as in a fresh run — the resume ends as an
    uninterrupted run (it used to fail whole, every session cancelled)."""
    whole = run_virtual(_fleet_run(tmp_path / "whole.db", agents(), None))
    assert isinstance(whole, FleetResult)
    cut = tmp_path / "cut.db"
    assert run_virtual(_fleet_run(cut, agents(), 17)) is None
    refused = {"claim": 1, "release": 1}

    def refusing(name: str) -> Any:
        real = getattr(SQLiteStore, name)

        async def call(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
            if refused[name]:
                refused[name] -= 1
                raise StoreError(f"{self.path}: the server closed the connection")
            return await real(self, *args, **kwargs)

        return call

    for name in refused:
        monkeypatch.setattr(SQLiteStore, name, refusing(name))

    async def resume() -> FleetResult:
        transport = SimTransport(driver())
        store = SQLiteStore(cut)
        fleet = Fleet(transport, max_concurrency=6, clock=loop_clock, store=store, lease_ttl_s=3)
        try:
            return await fleet.resume("run-1", agents=agents())
        finally:
            await store.aclose()
            await transport.aclose()

    resumed = run_virtual(resume())
    assert refused == {"claim": 0, "release": 0}  # both were refused once
    for a, b in zip(whole.sessions, resumed.sessions, strict=True):
        assert b.status == "completed", (b.session_id, b.error)
        assert b.messages == a.messages
    assert contents(cut, "run-1") == contents(tmp_path / "whole.db", "run-1")


def test_each_sessions_configuration_is_checked_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two agents of one name but different instructions share a run (the store notes the
    conflict; a run recorded before ``Fleet.run`` refused them): resuming with one of them
    is a ConfigError naming the other's session, before any attempt starts — only each
    name's first session used to be checked, and the other failed mid-attempt, inside the
    fleet's task group."""
    a, b = (
        Agent(name="x", model="sim", instructions=f"You are {who}.", tools=agents()[0].tools)
        for who in ("A", "B")
    )
    path = tmp_path / "two.db"
    with monkeypatch.context() as earlier_release:  # recorded as it was, without the check
        earlier_release.setattr(_durable, "check_one_config_per_name", lambda agents: None)
        assert run_virtual(run_cut(path, [a, b], 4, 2)) is None
    before = contents(path, "run-1")
    with pytest.raises(ConfigError, match=r"agent 'x' is not configured .*session 's01'"):
        run_virtual(resume(path, [a]))
    assert contents(path, "run-1") == before  # nothing ran, no attempt was recorded
