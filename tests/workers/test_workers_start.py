"""How many workers a run starts: no more than it has sessions (none for an empty run),
and at most ``MAX_WORKERS``; and what a worker that dies as it starts says."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from typing import Any

import pytest

from agentflow import ConfigError, Event, Fleet, HTTPTransport
from agentflow._fleet_checks import MAX_WORKERS
from agentflow._workers import _processes
from agentflow._workers._broker import WorkerHandle
from tests.sched.conftest import RecordingSim
from tests.wait import GUARD_S
from tests.workers.test_workers import workers_now
from tests.workers.tools import workload


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The sessions of each worker process a run launches, in order."""
    shards: list[list[int]] = []
    real_launch = _processes.ProcessLauncher.launch

    def launch(self: _processes.ProcessLauncher, index: int, sessions: list[int]) -> WorkerHandle:
        shards.append(list(sessions))
        return real_launch(self, index, sessions)

    monkeypatch.setattr(_processes.ProcessLauncher, "launch", launch)
    return shards


@pytest.mark.parametrize("n", [0, 1, 3])
async def test_no_more_workers_start_than_there_are_sessions(
    launched: list[list[int]], n: int
) -> None:
    """``workers=8`` for ``n`` sessions started all eight (each spawns, imports agentflow
    and the sessions' tools, and ends with nothing to run): 20 s of a 2-core machine for
    one session. Now one worker per session, none for an empty run, whose events and
    result are one process's."""
    types: list[str] = []

    def on_event(event: Event) -> None:
        types.append(event.type)

    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result = await Fleet(http, workers=8, callbacks=[on_event]).run(workload(n))
    assert launched == [[k] for k in range(n)]
    assert [s.session_id for s in result.sessions] == [f"s{k}" for k in range(n)]
    assert all(s.ok for s in result.sessions)
    assert types[0] == "fleet_start" and types[-1] == "fleet_end"
    assert types.count("session_end") == n
    assert not workers_now()


def test_more_workers_than_the_maximum_is_a_config_error() -> None:
    http = HTTPTransport("http://127.0.0.1:1")
    assert Fleet(http, workers=MAX_WORKERS).workers == MAX_WORKERS
    with pytest.raises(
        ConfigError, match=rf"Fleet\.workers must be an int in \[1, {MAX_WORKERS}\] or None"
    ):
        Fleet(http, workers=MAX_WORKERS + 1)


async def test_a_worker_that_dies_importing_an_unguarded_main_says_where_to_look() -> None:
    """A main script without the ``__main__`` guard runs again in each spawned worker,
    which dies with a traceback on its stderr before the parent hears from it: its
    sessions' WorkerError said only "ended (exit code 1)", not where to look or why."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.workers.unguarded_child",
        "http://127.0.0.1:9",  # never reached: no session starts
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,  # the workers' tracebacks
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GUARD_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == 0
    for k, (status, error) in enumerate(json.loads(out.splitlines()[-1])):
        assert status == "error"
        assert re.fullmatch(
            rf"worker {k} \(pid \d+\) ended \(exit code 1\) before session 's{k}' did: the "
            r"parent never heard from it, so it most likely ended before it loaded its "
            r"sessions: see its stderr; is the main module guarded by "
            r'`if __name__ == "__main__":`\?',
            error,
        ), error


async def test_a_worker_lost_at_every_start_fails_its_sessions_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A launcher whose every start is lost (a Ray actor whose ``__init__`` cannot import
    the user's module, on each new actor): the sessions run again, then fail quoting the
    reason — it used to reach only a warning log."""
    import agentflow._workers._parent as parent
    from agentflow._workers._processes import ProcessLauncher
    from agentflow._workers._sharded import WorkerLostError

    starts: list[int] = []

    class Lost(ProcessLauncher):
        rerun_lost = True  # as RayLauncher's

        async def start(self, w: Any, config: Any, blobs: Any) -> None:
            starts.append(w.index)
            raise WorkerLostError("ActorDiedError: No module named 'myagents'")

    monkeypatch.setattr(parent, "ProcessLauncher", Lost)
    async with RecordingSim() as sim, HTTPTransport(sim.base_url) as http:
        result = await asyncio.wait_for(
            Fleet(http, workers=2, backend="processes").run(workload(2)), GUARD_S
        )
    assert len(starts) > 2  # started again before they failed
    assert [s.status for s in result.sessions] == ["error", "error"]
    assert all("No module named 'myagents'" in str(s.error) for s in result.sessions)
