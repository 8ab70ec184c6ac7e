"""A resumed session goes back to the replica its recorded turns went to (the store keeps
its last turn's endpoint): that server may still hold its prefix in cache."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

from agentflow import Event, Fleet, FleetResult
from agentflow.embedded import SimTransport, run_virtual
from agentflow.sched import Router
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver

from .fleets import agents, stored

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
    """Run ``run-1`` and cancel it after ``stop_after`` turn ends, or (``None``) resume
    it; each turn's session, number and endpoint go to ``turns``."""

    def seen(event: Event) -> bool:
        if event.type == "turn_end":
            turns.append((event.session_id, event.turn, event.trace.endpoint))
        return stop_after is not None and len(turns) == stop_after and event.type == "turn_end"

    team = agents()
    sessions = [team[i % 3].session(f"task {i}", session_id=f"s{i:02d}") for i in range(N)]

    def go(fleet: Fleet) -> Awaitable[FleetResult]:
        if stop_after is None:
            return fleet.resume("run-1", agents=team)
        return fleet.run(sessions, run_id="run-1")

    # No prefix affinity: placement is sticky, else least-loaded.
    return await stored(
        path, _transports(), go, cut=seen, max_concurrency=4, router=Router(prefix_affinity=False)
    )


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
