"""``FleetResult.retries`` and ``replicas`` of a run on two workers when one of them does
not end its run itself (SIGKILL, SIGTERM): its counts up to then are still in them."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

from agentflow import Event, Fleet, HTTPTransport, RetryPolicy
from agentflow.sim import FaultConfig
from tests.sched.conftest import RecordingSim
from tests.workers.test_workers import gone, workers_now
from tests.workers.tools import workload


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_a_stopped_worker_s_counts_stay_in_the_result(sig: signal.Signals) -> None:
    """A third of the requests answer 500 and are retried; worker 1 gets ``sig`` as its
    fifth session ends. The result's counts were summed from the final counts each worker
    sends as its run ends: a killed worker sends none, a SIGTERMed one sent none either
    (its run was cancelled), so all it did was missing. Now each worker's counts so far
    travel with its events: the replica served at least every turn the sessions' results
    hold, the retries are at least their failed attempts, and none counts more requests
    than the server saw."""
    retry = RetryPolicy(max_attempts=20, backoff_s=0.001, max_backoff_s=0.002, jitter=False)
    ended = 0
    victims: list[int] = []

    def stop_worker_1(event: Event) -> None:
        nonlocal ended
        if event.type != "session_end" or int(event.session_id[1:]) % 2 == 0:
            return  # (s<k> is on worker k % 2)
        ended += 1
        if ended == 5:
            (pid,) = (p.pid for p in multiprocessing.active_children() if p.name.endswith("-1"))
            assert pid is not None
            victims.append(pid)
            os.kill(pid, sig)

    faults = FaultConfig(server_error=0.3, seed=5)
    async with RecordingSim(faults=faults) as sim, HTTPTransport(sim.base_url) as http:
        fleet = Fleet(http, max_concurrency=2, workers=2, retry=retry, callbacks=[stop_worker_1])
        result = await fleet.run(workload(40))
    assert victims
    assert sum(s.ok for s in result.sessions) < 40  # worker 1 had sessions left
    turns = [t for s in result.sessions for t in s.turns]
    failed_attempts = sum(len(t.failed_attempts) for t in turns)
    assert failed_attempts > 0
    (replica,) = result.replicas
    assert replica.served >= len(turns)
    assert result.retries >= failed_attempts
    assert replica.failures >= result.retries
    assert replica.served + replica.failures <= len(sim.seen)
    assert not workers_now()
    assert gone(victims[0])
