"""A prefix's leader that never has a first token does not hold its followers for long,
and a replica that failed it stops drawing the prefix's new sessions.

A replica that accepts, sends its headers and goes silent kept every session parked
behind its leader for the leader's whole idle timeout (300 s) while healthy replicas
sat idle; then prefix affinity sent them back to it, to hang another 300 s.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport, Replica
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router, Scheduler
from agentflow.sched._warmups import WARMUP_TIMEOUT_S
from tests.sched.conftest import Acquirer, IdleTransport, settle, ticket
from tests.transport.rawserver import chunk, content, head, raw_server

SHARED = Agent(name="a", model="m", instructions="You are a helpful agent. " * 20)


def _leader_hangs(**fleet_options: object) -> list[tuple[str, float]]:
    """Six sessions of one prefix over a replica that goes silent after its headers (the
    leader's) and a healthy one: what each server saw, at what virtual time."""
    events: list[tuple[str, float]] = []

    def note(what: str) -> None:
        events.append((what, asyncio.get_running_loop().time()))

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        note("hang")
        writer.write(head())
        await writer.drain()
        await reader.read()  # until the client gives up on it
        note("hang closed")

    async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        note("ok")
        writer.write(head())
        for i in range(3):
            writer.write(chunk(content(f"w{i} ")))
            await writer.drain()
            await asyncio.sleep(0.5)
        writer.write(chunk(content(None, "stop")) + chunk(b"data: [DONE]\n\n") + chunk(b""))
        await writer.drain()

    async def main() -> None:
        async with raw_server(hang) as silent, raw_server(ok) as healthy:
            replicas = [
                Replica(transport=HTTPTransport(srv.base_url, clock=loop_clock), name=name)
                for name, srv in (("silent", silent), ("healthy", healthy))
            ]
            fleet = Fleet(replicas, clock=loop_clock, probe_slots=False, **fleet_options)  # type: ignore[arg-type]
            result = await fleet.run(SHARED.session(f"q{i}") for i in range(6))
        assert all(s.ok for s in result.sessions)

    run_virtual(main())
    start = events[0][1]
    return [(what, at - start) for what, at in events]


def test_followers_go_to_a_healthy_replica_while_the_leader_hangs() -> None:
    """Leader on a replica that goes silent after its headers: the five sessions parked
    behind it go to the healthy replica after the warm-up timeout, all of them before
    the leader's idle timeout ends, and none is drawn back to the silent replica."""
    events = [what for what, _ in _leader_hangs()]
    assert events.count("hang") == 1  # the leader only
    closed = events.index("hang closed")
    assert events[:closed].count("ok") == 5  # every follower, before the leader gave up
    assert events[closed + 1 :] == ["ok"]  # the leader's retry


@pytest.mark.parametrize("timeout_s", [2.0, WARMUP_TIMEOUT_S])
def test_a_fleets_warm_up_timeout_reaches_its_scheduler(timeout_s: float) -> None:
    """``Fleet(warmup_timeout_s=...)`` is the wait its runs use (they always used the
    scheduler's default); a bad value is refused naming the fleet's field."""
    events = _leader_hangs(warmup_timeout_s=timeout_s)
    followers = [at for what, at in events if what == "ok"][:5]
    assert len(followers) == 5 and all(timeout_s <= at < timeout_s + 1 for at in followers)
    with pytest.raises(ConfigError, match=r"Fleet\.warmup_timeout_s"):
        Fleet(Replica(transport=IdleTransport()), warmup_timeout_s=0)


async def test_a_leader_failing_on_its_replica_stops_the_prefix_being_drawn_there() -> None:
    """The leader of P fails on A in a way that blames A: its followers go at once, and
    affinity no longer draws them to A (the less-loaded B takes the first)."""
    replicas = [Replica(transport=IdleTransport(n), name=n) for n in ("A", "B")]
    sched = Scheduler(replicas, clock=loop_clock, router=Router())
    acq = Acquirer(sched)
    acq.submit(ticket("lead", prefix_key="P"))  # A (first of the least loaded)
    acq.submit(ticket("x"))  # B
    acq.submit(ticket("y"))  # A: A 2, B 1 in flight
    acq.submit(ticket("f1", prefix_key="P"))
    acq.submit(ticket("f2", prefix_key="P"))
    await settle()
    assert [acq.grants[s].replica.name for s in acq.order] == ["A", "B", "A"]
    assert sched.waiting == 2  # f1, f2 parked behind the leader on A
    acq.release("lead", ok=False)
    await settle()
    f1 = acq.grants["f1"]
    assert f1.replica.name == "B" and f1.leader  # not drawn back to A; B's warm-up
    await sched.aclose()


def test_the_warm_up_timeout_is_configurable_and_checked() -> None:
    async def main() -> list[str]:
        replica = Replica(transport=IdleTransport("A"), name="A")
        sched = Scheduler([replica], clock=loop_clock, warmup_timeout_s=5.0)
        acq = Acquirer(sched)
        acq.submit(ticket("lead", prefix_key="P"))
        acq.submit(ticket("f", prefix_key="P"))
        await settle()
        before = list(acq.order)
        await asyncio.sleep(5.5)  # virtual time: past the timeout, no first token
        order = [*before, "|", *acq.order[len(before) :]]
        await sched.aclose()
        return order

    assert WARMUP_TIMEOUT_S == 20.0
    assert run_virtual(main()) == ["lead", "|", "f"]
    for bad in (0, -1.0, float("inf"), float("nan"), "5", True):
        with pytest.raises(ConfigError, match="warmup_timeout_s"):
            Scheduler([Replica(transport=IdleTransport())], clock=loop_clock, warmup_timeout_s=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["no", None, 1])
def test_the_warm_up_switch_is_checked(bad: object) -> None:
    """``Scheduler(prefix_warmup="no")`` was taken by its truth (warm-up on), where
    Fleet's refused it; a Fleet's ``probe_slots`` is refused naming its field."""
    with pytest.raises(ConfigError, match=r"Scheduler\.prefix_warmup must be True or False"):
        Scheduler([Replica(transport=IdleTransport())], clock=loop_clock, prefix_warmup=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Fleet\.probe_slots must be True or False"):
        Fleet(Replica(transport=IdleTransport()), probe_slots=bad)  # type: ignore[arg-type]
