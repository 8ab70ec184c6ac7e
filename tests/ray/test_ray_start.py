"""Starting the actors of ``Fleet(workers=N, backend="ray")``, on the module-scoped local
Ray of ``tests/ray/test_ray.py`` (its fixture, imported; two CPUs) against the HTTP
simulator on loopback: an actor whose start times out is killed before its sessions fail;
one lost while it starts has its sessions run again; the CPU check counts the actors that
will start."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow import ConfigError, Event, Fleet, HTTPTransport, WorkerError
from agentflow._workers._broker import WorkerHandle
from tests.sched.conftest import RecordingSim
from tests.wait import GUARD_S
from tests.workers.tools import workload

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'agentflow[ray]'")

from tests.ray.test_ray import agentflow_actors, local_ray  # noqa: E402

__all__ = ["local_ray"]  # the module's one local Ray (autouse)


async def test_an_actor_whose_start_times_out_is_killed_before_its_sessions_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start bound runs out (here at once) before the actor has its sessions: the
    actor is killed before its sessions fail — it used to be killed only when the run
    ended, so one that finished its start late ran sessions already failed, on slots
    handed back."""
    import agentflow._workers._ray as ray_backend

    monkeypatch.setattr(ray_backend, "_START_TIMEOUT_S", 0.0)
    order: list[str] = []
    kill = ray_backend.RayLauncher.kill

    def recorded_kill(self: Any, w: WorkerHandle) -> None:
        order.append(f"kill {w.index}")
        kill(self, w)

    monkeypatch.setattr(ray_backend.RayLauncher, "kill", recorded_kill)

    def on_end(event: Event) -> None:
        if event.type == "session_end":
            order.append(f"end {event.session_id}")

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, workers=1, backend="ray", callbacks=[on_end])
        result = await fleet.run(workload(2))
    assert len(result.failed) == 2
    for s in result.failed:
        assert isinstance(s.error, WorkerError)
        assert "did not start within 0 s" in str(s.error)
    assert order.index("kill 0") < order.index("end s0")
    assert order.index("kill 0") < order.index("end s1")
    assert not sim.seen
    assert not agentflow_actors()


async def test_an_actor_lost_while_it_starts_has_its_sessions_run_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Actor 0 dies before it takes its sessions (killed, then handed them: Ray fails the
    start with ``RayActorError``): its sessions run again on a new actor, as a lost
    actor's are, and every session completes (they used to fail with a WorkerError)."""
    import agentflow._workers._ray as ray_backend

    start = ray_backend.RayLauncher.start
    killed: list[int] = []

    async def start_dead(self: Any, w: WorkerHandle, config: Any, blobs: Any) -> None:
        if w.index == 0:
            from ray.exceptions import RayActorError

            killed.append(w.index)
            ray.kill(w.actor, no_restart=True)
            for _ in range(int(GUARD_S * 4)):  # until Ray says it is dead (a hang guard)
                try:
                    await w.actor.__ray_ready__.remote()
                except RayActorError:
                    break
                await asyncio.sleep(0.25)
        await start(self, w, config, blobs)

    monkeypatch.setattr(ray_backend.RayLauncher, "start", start_dead)
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result = await Fleet(http, workers=2, backend="ray").run(workload(4))
    assert killed == [0]
    assert not result.failed, [s.error for s in result.failed]
    assert all(s.status == "completed" for s in result.sessions)
    assert not agentflow_actors()


async def test_the_cpu_check_counts_the_actors_that_start() -> None:
    """workers=3 with two sessions starts two actors, which the 2-CPU cluster places: the
    run completes (it used to be refused for the third actor, which never starts);
    workers=5 with three sessions is refused, naming the three actors it would start."""
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result = await Fleet(http, workers=3, backend="ray").run(workload(2))
        assert not result.failed, [s.error for s in result.failed]
        assert len(result.sessions) == 2
        with pytest.raises(
            ConfigError,
            match=r"workers=5, backend='ray'\): starts 3 actors for 3 sessions; each actor "
            r"takes one CPU, and the Ray cluster has 2: use workers=2 or fewer",
        ):
            await Fleet(http, workers=5, backend="ray").run(workload(3))
    assert not agentflow_actors()
