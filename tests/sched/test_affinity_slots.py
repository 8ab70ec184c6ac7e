"""A prefix's affinity does not hold on a replica with as many requests in flight as its
llama.cpp server has slots (as the fleet learnt them from ``GET /props``): the next
session of that prefix goes to the least-loaded replica.

With the default ``balance_slack`` (4), a fleet of up to 4 in flight used to go whole to
one 2-slot llama.cpp replica — half of it waiting in the server's queue — while another
replica sat idle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from aiohttp import web

from agentflow import Agent, Fleet, HTTPTransport, Replica
from agentflow import llamacpp as lc
from agentflow._redact import display_url
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router
from agentflow.sched._replica import ReplicaState
from agentflow.testing import Reply
from tests.sched.conftest import IdleTransport
from tests.test_llamacpp_fleet_slots import FakeLlama
from tests.wait import GUARD_S

SHARED = Agent(name="a", model="m", instructions="You are a helpful agent. " * 20)
SLOTS = 2


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """No endpoint's slots known before or after (the memory is per process)."""
    lc._probed.clear()
    lc._warned.clear()
    yield
    lc._probed.clear()
    lc._warned.clear()


class SlotServer(FakeLlama):
    """A llama.cpp stand-in (``/props`` says ``total_slots``: ``FakeLlama``'s) whose chats
    each stream a few words, 0.2 s apart; how many chats were in flight at most is kept."""

    def __init__(self) -> None:
        super().__init__(SLOTS)
        self.now = self.peak = 0

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.chats += 1
        self.now += 1
        self.peak = max(self.peak, self.now)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:
            await resp.prepare(request)
            for i, frame in enumerate(Reply.text("one two three four").frames):
                if i:
                    await asyncio.sleep(0.2)
                await resp.write(frame)
        finally:
            self.now -= 1  # (the client is done at the last frame)
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp


@pytest.mark.parametrize("shared_at", ["first_token", "end"])
def test_a_prefix_fills_a_llamacpp_replicas_slots_then_goes_to_the_idle_one(
    shared_at: str,
) -> None:
    """Four sessions of one prefix, four in flight, two 2-slot llama.cpp replicas whose
    slots the fleet knows: neither server has more than its slots in flight at once."""

    async def main() -> tuple[SlotServer, SlotServer]:
        async with SlotServer() as a, SlotServer() as b:
            async with (
                HTTPTransport(a.base_url, clock=loop_clock) as ta,
                HTTPTransport(b.base_url, clock=loop_clock) as tb,
            ):
                replicas = [
                    Replica(transport=t, name=n, prefix_shared_at=shared_at)  # type: ignore[arg-type]
                    for n, t in (("A", ta), ("B", tb))
                ]
                # (a run asks in the background; asked first, the whole run knows)
                await lc.watch_fleet_slots(lc.fleet_endpoints(replicas, 4, 4))
                assert lc._learned_slots(a.base_url) == SLOTS
                fleet = Fleet(replicas, max_concurrency=4, clock=loop_clock)
                run = fleet.run(SHARED.session(f"q{i}") for i in range(4))
                result = await asyncio.wait_for(run, GUARD_S)
            assert all(s.ok for s in result.sessions), [s.error for s in result.failed]
            return a, b

    a, b = run_virtual(main())
    assert a.chats + b.chats == 4
    assert b.chats > 0  # not all on A while B sat idle
    assert a.peak <= SLOTS and b.peak <= SLOTS


def test_only_a_known_llamacpp_servers_slots_count() -> None:
    """A replica whose server's slots are not known (not asked yet, not llama.cpp, not
    over HTTP) is never saturated: the affinity holds to ``balance_slack`` as before."""
    http = HTTPTransport("http://127.0.0.1:9/v1")
    replica = ReplicaState(Replica(transport=http, name="A"), loop_clock)
    replica.in_flight = 3
    assert not Router.saturated(replica)
    lc._probed[display_url(http.config.base_url)] = None  # (answered: not llama.cpp)
    assert not Router.saturated(replica)
    lc._probed[display_url(http.config.base_url)] = 4
    assert not Router.saturated(replica)
    replica.in_flight = 4
    assert Router.saturated(replica)
    idle = ReplicaState(Replica(transport=IdleTransport("A")), loop_clock)
    idle.in_flight = 100
    assert not Router.saturated(idle)
