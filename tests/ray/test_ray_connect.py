"""Connecting to Ray for ``Fleet(workers=N, backend="ray")`` when Ray is not initialized:
an unreachable cluster (``RAY_ADDRESS`` naming no cluster; in a child process, this one
starts no Ray) fails the run with a :class:`ConfigError` once the bound runs out, without
blocking the event loop meanwhile, and the process still exits."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tests.wait import GUARD_S

pytest.importorskip("ray", reason="Ray is not installed: pip install 'agentflow[ray]'")


async def test_an_unreachable_cluster_fails_the_run_naming_it_and_the_loop_runs_meanwhile() -> None:
    """``ray.init()`` for ``RAY_ADDRESS=127.0.0.1:1`` retries for minutes, blocking the
    loop (no timeout or Ctrl-C could stop the run): the address is asked first, off the
    loop, and the run raises a ConfigError naming it; the process then exits."""
    env = {
        **os.environ,
        "RAY_ADDRESS": "127.0.0.1:1",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.ray.unreachable",
        "1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GUARD_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode()
    assert proc.returncode == 0, text
    assert (
        "ConfigError: backend='ray': could not connect to the Ray cluster at '127.0.0.1:1' "
        "(RAY_ADDRESS): ConnectionRefusedError" in text
    ), text


def test_ray_address_host_and_port() -> None:
    """What the probe asks: ``host:port`` and ``ray://host:port``; ``auto`` and ``local``
    are Ray's to find."""
    from agentflow._workers._ray import _host_port

    assert _host_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert _host_port("ray://head:10001") == ("head", 10001)
    assert _host_port("[::1]:6379") == ("::1", 6379)
    assert _host_port("auto") is None and _host_port("local") is None


async def test_a_local_ray_started_for_the_run_outlives_the_connect() -> None:
    """With Ray not initialized and no ``RAY_ADDRESS``, the run starts a local Ray off
    the loop and its actors run every session: the local Ray's daemons, which die with
    the thread that started them, last beyond ``ray.init()`` (a local Ray; shut down
    after, and none of its daemons is left)."""
    from agentflow import Fleet, HTTPTransport
    from tests.ray.test_ray import agentflow_actors, ray_daemons
    from tests.sched.conftest import RecordingSim
    from tests.workers.tools import workload

    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    before = ray_daemons()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("RAY_ADDRESS", raising=False)
        try:
            async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
                fleet = Fleet(http, workers=1, backend="ray")
                result = await asyncio.wait_for(fleet.run(workload(2)), GUARD_S)
            assert not result.failed, [s.error for s in result.failed]
            assert ray_daemons() - before  # it started a local Ray
            assert not agentflow_actors()
        finally:
            ray.shutdown()
    for _ in range(300):  # at most 30 s
        if not ray_daemons() - before:
            break
        await asyncio.sleep(0.1)
    assert not ray_daemons() - before
