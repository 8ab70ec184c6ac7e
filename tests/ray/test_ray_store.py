"""``Fleet(workers=2, backend="ray", store=SQLiteStore(...))`` on the module-scoped local Ray
of ``tests/ray/test_ray.py`` (its fixture, imported) against the HTTP simulator on
loopback: an actor killed mid-run has its sessions continue on a new actor from the
store's finished turns — the killed session's recorded turn is not sent to the server
again — and the run completes with the transcripts of one process, each turn recorded
once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from agentflow import Fleet, HTTPTransport
from agentflow.store import SQLiteStore
from tests.sched.conftest import RecordingSim
from tests.store.fleets import contents
from tests.workers.test_workers_store import RUN as RUN_W
from tests.workers.test_workers_store import check_resumed, cut, one_process_run
from tests.workers.tools import PLAIN, TOOL, workload

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'agentflow[ray]'")

from tests.ray.test_ray import actor_killer, agentflow_actors, local_ray  # noqa: E402

__all__ = ["local_ray"]  # the module's one local Ray (autouse)

RUN = "run-ray"


async def test_a_killed_actor_continues_from_the_store(tmp_path: Path) -> None:
    """``ray.kill`` the actor of a tool session right after that session's first turn
    ended (its record reached the driver before the event did): the run completes every
    session with the same transcripts as one process; the server saw that session's
    first turn once (the new actor continued after it, running the recorded tool call's
    turn, not the session from its start); the store holds each turn once (no
    conflicts), the same rows as a one-process run; no actor is left."""
    one_path = tmp_path / "one.db"
    one = await one_process_run(one_path, RUN)
    victims: list[str] = []
    kill_one = actor_killer(victims)

    path = tmp_path / "ray.db"
    store = SQLiteStore(path)
    try:
        async with RecordingSim(seed=7) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(
                http,
                max_concurrency=2,
                workers=2,
                backend="ray",
                store=store,
                callbacks=[kill_one],
            )
            result = await fleet.run(workload(20), run_id=RUN)
        assert await store.conflicts(RUN) == []
    finally:
        await store.aclose()
    assert victims, "no tool session ended a first turn on actor 1"
    assert not result.failed, [s.error for s in result.failed]
    for a, b in zip(one.sessions, result.sessions, strict=True):
        assert (a.status, a.final_output, a.messages) == (b.status, b.final_output, b.messages)
        assert len(a.turns) == len(b.turns)
    (victim,) = victims
    per_turn = Counter(
        len(x.body["messages"]) for x in sim.seen if x.headers.get("X-Session-ID") == victim
    )
    # Its first turn (system + user message) was recorded before the kill: sent once.
    assert per_turn[2] == 1
    # Its second turn (after the tool result) was sent (again, if it was in flight at
    # the kill) by the new actor, and the session completed there.
    assert sum(c for n, c in per_turn.items() if n > 2) >= 1
    assert contents(path, RUN) == contents(one_path, RUN)
    assert not agentflow_actors()


async def test_a_cancelled_ray_run_resumes_on_ray_as_if_uninterrupted(tmp_path: Path) -> None:
    """Cancel a run on two Ray actors after 5 turn ends, resume it on two actors: every
    session ends as in an uninterrupted one-process run; the resumed run sent the server
    none of the turns the store held and each missing turn once; no conflicts; no actor
    is left."""
    async with RecordingSim(seed=9) as sim, HTTPTransport(sim.base_url) as http:
        whole = await Fleet(http, max_concurrency=2).run(workload(16))
    path = tmp_path / "cut.db"
    _, recorded = await cut(path, 5, backend="ray")
    assert 5 <= recorded < 24  # partway
    store = SQLiteStore(path)
    try:
        before = await store.load(RUN_W)
        done = {(s.session_id, i) for s in before.sessions for i in range(len(s.turns))}
        async with RecordingSim(seed=9) as sim, HTTPTransport(sim.base_url) as http:
            fleet = Fleet(http, max_concurrency=2, workers=2, backend="ray", store=store)
            resumed = await fleet.resume(RUN_W, agents=[PLAIN, TOOL])
        assert await store.conflicts(RUN_W) == []
    finally:
        await store.aclose()
    check_resumed(whole, resumed, sim, done)
    assert agentflow_actors() == []
