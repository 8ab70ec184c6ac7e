"""How many workers a run starts: no more than it has sessions (none for an empty run),
and at most ``MAX_WORKERS``."""

from __future__ import annotations

import pytest

from agentflow import ConfigError, Event, Fleet, HTTPTransport
from agentflow._fleet_checks import MAX_WORKERS
from agentflow._workers import _processes
from agentflow._workers._broker import WorkerHandle
from tests.sched.conftest import RecordingSim
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
