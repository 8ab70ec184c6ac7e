"""A policy's rank must be a number the heap can order, and a dispatcher that dies fails
every ticket it holds, the one it had just popped included.

A user policy that ranked one agent's turns ``None`` made the heap's comparisons raise:
in another session's ``acquire`` (a bare TypeError), or in the dispatcher, which died
after popping a ticket that was then in no queue, so that ticket's session — and
``Fleet.run`` — waited for ever. A NaN rank compares false with everything and silently
reordered the tickets queued around it. Virtual time: a hang is a timeout, not a wait.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from agentflow import Agent, ConfigError, Fleet
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sched import Limits, Replica, ReplicaState, Router, Scheduler, SchedulerState, Ticket
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from tests.sched.conftest import QUICK, IdleTransport, settle, ticket


def _one_slot(**kw: object) -> Scheduler:
    return Scheduler(
        [Replica(transport=IdleTransport())],
        limits=Limits(max_in_flight=1),
        clock=loop_clock,
        prefix_warmup=False,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "bad", [None, "1", True, math.nan, 10**400], ids=["None", "str", "bool", "nan", "huge"]
)
def test_a_rank_the_heap_cannot_order_is_a_config_error_naming_the_policy(bad: object) -> None:
    """The odd ticket's acquire fails with a ConfigError naming the policy and the
    session; the tickets queued around it are granted in their order."""

    def odd_one_out(t: Ticket, state: SchedulerState, /) -> float:
        return bad if t.session_id == "odd" else float(t.seq)  # type: ignore[return-value]

    async def main() -> None:
        sched = _one_slot(policy=odd_one_out)
        holder = await sched.acquire(ticket("holder"))
        queued = [asyncio.create_task(sched.acquire(ticket(f"q{i}"))) for i in range(3)]
        await settle()
        # (10**400 raised a bare OverflowError, from math.isnan; None and "1" were said
        # to be "not NaN")
        says = r"policy odd_one_out .* session 'odd' .*: a rank must be a real number \(not NaN\)"
        with pytest.raises(ConfigError, match=says):
            await asyncio.wait_for(sched.acquire(ticket("odd")), 60.0)
        sched.release(holder, used_tokens=None, ok=True)
        for task in queued:  # one slot: each is granted, then released, in turn
            grant = await asyncio.wait_for(task, 60.0)
            sched.release(grant, used_tokens=None, ok=True)
        assert sched.dispatched == 4 and sched.waiting == 0 and sched.in_flight == 0
        await sched.aclose()

    run_virtual(main())


class _BrokenRouter(Router):
    """A router whose bookkeeping fails for one session: a bug the dispatcher dies of
    after it has popped that session's ticket."""

    def placed(self, t: Ticket, replica: ReplicaState) -> None:
        if t.session_id == "victim":
            raise RuntimeError("router broke")
        super().placed(t, replica)


def test_a_dispatcher_that_dies_after_popping_a_ticket_fails_that_ticket_too() -> None:
    async def main() -> None:
        sched = _one_slot(router=_BrokenRouter())
        holder = await sched.acquire(ticket("holder"))
        victim = asyncio.create_task(sched.acquire(ticket("victim")))
        behind = asyncio.create_task(sched.acquire(ticket("behind")))
        await settle()
        sched.release(holder, used_tokens=None, ok=True)  # the dispatcher pops "victim"
        _, pending = await asyncio.wait({victim, behind}, timeout=3600.0)
        assert not pending, "the popped ticket waits for ever"
        for task in (victim, behind):
            with pytest.raises(RuntimeError, match=r"dispatcher failed.*router broke"):
                task.result()
        await sched.aclose()

    run_virtual(main())


def test_a_fleet_whose_policy_ranks_one_agent_none_ends() -> None:
    """The repro: ``b``'s sessions fail with the ConfigError, ``a``'s complete, and the
    run returns (it used to wait for ever on a ticket the dispatcher had lost)."""

    def none_for_b(t: Ticket, state: SchedulerState, /) -> float:
        return None if t.agent == "b" else float(t.ready_ns)  # type: ignore[return-value]

    async def main() -> None:
        engine = Engine(QUICK, seed=1, textgen=TextGenConfig(tool_rounds=0))
        transport = SimTransport(EngineDriver(engine))
        a, b = Agent(name="a", model="m"), Agent(name="b", model="m")
        fleet = Fleet(
            transport,
            policy=none_for_b,
            max_concurrency=1,
            clock=loop_clock,
            probe_slots=False,
            prefix_warmup=False,
        )
        sessions = [(a if i % 3 else b).session(f"q{i}", session_id=f"s{i:02d}") for i in range(12)]
        try:
            result = await asyncio.wait_for(fleet.run(sessions), 3600.0)
        finally:
            await transport.aclose()
        for s in result.sessions:
            if s.session_id in {"s00", "s03", "s06", "s09"}:
                assert s.status == "error" and isinstance(s.error, ConfigError)
                assert "none_for_b" in str(s.error)
            else:
                assert s.status == "completed"

    run_virtual(main())
