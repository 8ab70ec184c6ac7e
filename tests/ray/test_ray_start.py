"""Starting the actors of ``Fleet(workers=N, backend="ray")``, on the module-scoped local
Ray of ``tests/ray/test_ray.py`` (its fixture, imported; two CPUs) against the HTTP
simulator on loopback: an actor whose start times out is killed before its sessions
fail."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import Event, Fleet, HTTPTransport, WorkerError
from agentflow._workers._broker import WorkerHandle
from tests.sched.conftest import RecordingSim
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
