"""A resumed session goes back to the replica its recorded turns went to (the store keeps
its last turn's endpoint): that server may still hold its prefix in cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentflow import Event, Fleet, FleetResult
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sched import Router
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.store import SQLiteStore

from .fleets import agents

N = 12
PROFILES = ("deepseek-v4.1-flash-gb300", "deepseek-v4-gb300")  # two endpoints: sim://…


def _transports() -> list[SimTransport]:
    return [
        SimTransport(
            EngineDriver(
                Engine(p, seed=3, textgen=TextGenConfig(tool_rounds=3, answer_tokens=(8, 24)))
            )
        )
        for p in PROFILES
    ]


async def _run(path: Path, stop_after: int | None, turns: list[tuple[str, int, str]]) -> object:
    transports = _transports()
    store = SQLiteStore(path)
    task: asyncio.Task[FleetResult] | None = None

    def seen(event: Event) -> None:
        if event.type == "turn_end":
            turns.append((event.session_id, event.turn, event.trace.endpoint))
            if len(turns) == stop_after and task is not None:
                task.cancel()

    team = agents()
    sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(N)]
    # No prefix affinity: placement is sticky, else least-loaded.
    fleet = Fleet(
        transports, max_concurrency=4, clock=loop_clock, store=store, callbacks=[seen],
        router=Router(prefix_affinity=False),
    )  # fmt: skip
    try:
        if stop_after is None:
            return await fleet.resume("run-1", agents=team)
        task = asyncio.ensure_future(fleet.run(sessions, run_id="run-1"))
        try:
            return await task
        except asyncio.CancelledError:
            return None
    finally:
        await store.aclose()
        for t in transports:
            await t.aclose()


def test_resumed_sessions_go_back_to_their_replica(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    before: list[tuple[str, int, str]] = []
    assert run_virtual(_run(path, 14, before)) is None
    home = {sid: endpoint for sid, _, endpoint in before}  # each session's last turn
    assert len(set(home.values())) == 2  # both replicas served turns before the cut

    after: list[tuple[str, int, str]] = []
    result = run_virtual(_run(path, None, after))
    assert isinstance(result, FleetResult)
    first_after: dict[str, str] = {}
    for sid, _, endpoint in after:
        first_after.setdefault(sid, endpoint)
    resumed = [sid for sid in first_after if sid in home]
    assert resumed  # sessions cut mid-way went on
    assert all(first_after[sid] == home[sid] for sid in resumed), (first_after, home)
