"""Random lease traffic between a real Broker and real LeaseClients/LeasedSchedulers,
in virtual time: with fewer slots than workers, no worker waits for ever and the
fleet's bound holds. Messages are delivered at once, in order (as on a pipe)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from agentflow._workers._broker import Broker
from agentflow._workers._leased import LeaseClient, LeasedScheduler
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Limits, Replica
from tests.sched.conftest import IdleTransport, ticket

WORKERS, CAP = 3, 2


class _Handle:
    alive = True
    client: LeaseClient

    def send(self, msg: tuple[Any, ...]) -> None:
        kind, n = msg
        getattr(self.client, "granted_slots" if kind == "slots" else kind)(n)


class _Run:
    def __init__(self, broker: Broker, i: int) -> None:
        self.broker, self.i = broker, i

    def send(self, msg: tuple[Any, ...]) -> None:
        kind, n, *_ = msg
        if kind == "want_slots":
            self.broker.want_slots(self.i, n)
        elif kind in ("return_slots", "return_spare"):
            self.broker.returned(self.i, n, owed=kind == "return_slots")


def _trial(seed: int, rated: bool) -> list[tuple[Any, ...]]:
    rnd = random.Random(seed)
    handles = [_Handle() for _ in range(WORKERS)]
    rpm = 60 if rated else None
    broker = Broker(Limits(max_in_flight=CAP, rpm=rpm), handles, [(0, 5)] * WORKERS)  # type: ignore[arg-type]
    bad: list[tuple[Any, ...]] = []

    async def main() -> None:
        scheds = []
        for i, h in enumerate(handles):
            config = {"slots": True, "rates": rated, "slot_batch": 1, "rpm": rpm, "tpm": None,
                      "initial_slots": broker.held[i]}  # fmt: skip
            h.client = LeaseClient(_Run(broker, i), config)  # type: ignore[arg-type]
            replica = Replica(transport=IdleTransport("r"), name="r")
            scheds.append(LeasedScheduler([replica], clock=loop_clock, client=h.client))

        def check() -> None:
            if sum(s.in_flight for s in scheds) > CAP or sum(broker.held) > CAP:
                bad.append(("over", [s.in_flight for s in scheds], list(broker.held)))

        async def feeder() -> None:  # the broker's rate grants, as they come
            while True:
                await asyncio.sleep(rnd.uniform(0.05, 0.5))
                for h in handles:
                    h.client.granted_rates(rnd.randint(0, 2), 0.0)

        async def session(i: int, k: int) -> None:
            await asyncio.sleep(rnd.uniform(0, 3))
            for _ in range(3):
                grant = await scheds[i].acquire(ticket(f"s{i}-{k}"))
                check()
                await asyncio.sleep(rnd.uniform(0.01, 1))
                scheds[i].release(grant, used_tokens=None, ok=True)
                await asyncio.sleep(rnd.uniform(0, 0.3))

        async def status() -> None:  # every worker's status, every 0.25 s
            while True:
                await asyncio.sleep(0.25)
                for i, s in enumerate(scheds):
                    broker.live[i] = (s.in_flight, s.waiting)
                    broker.idle_check(i)

        side = [asyncio.ensure_future(feeder()), asyncio.ensure_future(status())]
        sessions = [session(i, k) for i in range(WORKERS) for k in range(rnd.randint(1, 4))]
        try:
            await asyncio.wait_for(asyncio.gather(*sessions), 36000)  # virtual seconds
        except TimeoutError:
            bad.append(("deadlock", list(broker.held), dict(broker.pending)))
        for t in side:
            t.cancel()
        for s in scheds:
            await s.aclose()

    run_virtual(main())
    return bad


@pytest.mark.parametrize("rated", [True, False])
def test_fewer_slots_than_workers_never_deadlock(rated: bool) -> None:
    failed = {seed: bad for seed in range(60) if (bad := _trial(seed, rated))}
    assert failed == {}
