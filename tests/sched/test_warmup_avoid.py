"""A prefix's leader that failed on a replica, or had no first token within the warm-up
timeout, does not send its followers there: the prefix is cold on that replica again
(not warm), and its tickets go to another replica with room while there is one.

Both paths used to mark the prefix *warm* on the replica that never prefilled it: every
follower re-placed went there whenever it was the least loaded (none parked, none led
elsewhere), and affinity pointed back at it — a silent server held them all for its idle
timeout while a busy but healthy one had room.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, Fleet, HTTPTransport, Limits, Replica
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Router, Scheduler
from agentflow.sched._warmups import AVOID_S
from tests.sched.conftest import Acquirer, IdleTransport, settle, ticket
from tests.transport.rawserver import chunk, content, head, raw_server

SHARED = Agent(name="a", model="m", instructions="You are a helpful agent. " * 20)
OTHER = Agent(name="o", model="m", instructions="Another agent entirely. " * 20)


@pytest.mark.parametrize("how", ["timeout", "failure"])
def test_followers_of_a_failed_leader_avoid_its_replica(how: str) -> None:
    """The leader of P hangs past the timeout (or fails, blaming A) while B, the healthy
    replica, is the busier: one follower leads on B, the rest park behind it, and none
    goes to A; affinity points at B."""

    async def main() -> None:
        reps = [
            Replica(transport=IdleTransport(n), limits=Limits(max_in_flight=8), name=n)
            for n in "AB"
        ]
        sched = Scheduler(reps, clock=loop_clock, router=Router(sticky=False), warmup_timeout_s=5.0)
        acq = Acquirer(sched)
        acq.submit(ticket("lead", prefix_key="P", prompt_tokens=1000))
        await settle()
        for i in range(2):  # B busier than A (in requests)
            acq.submit(ticket(f"other{i}", prefix_key=f"Q{i}"))
            await settle()
        for i in range(4):
            acq.submit(ticket(f"f{i}", prefix_key="P"))
        await settle()
        placed = {s: g.replica.name for s, g in acq.grants.items()}
        assert placed == {"lead": "A", "other0": "B", "other1": "B"} and sched.waiting == 4
        if how == "timeout":
            await asyncio.sleep(5.5)  # virtual time: past the warm-up timeout
        else:
            acq.release("lead", ok=False)
        await settle()
        followers = {s: (g.replica.name, g.leader) for s, g in acq.grants.items() if s[0] == "f"}
        assert followers == {"f0": ("B", True)}
        assert sched.waiting == 3  # parked behind B's leader, not sent to A
        assert sched.router._prefix["P"].name == "B"
        sched.warmed("P", sched.replicas[1])
        await settle()
        assert {acq.grants[f"f{i}"].replica.name for i in range(4)} == {"B"}
        for s in list(acq.grants):
            acq.release(s)
        await sched.aclose()

    run_virtual(main())


def test_a_replica_is_avoided_for_a_while_after_its_leader_ends() -> None:
    """A failed leader's replica is avoided for AVOID_S; a timed-out one's until its
    stream ends, then AVOID_S; a leader that warms it there lifts it at once."""

    async def main() -> None:
        sched = Scheduler(
            [Replica(transport=IdleTransport(n), name=n) for n in "AB"],
            clock=loop_clock,
            router=Router(sticky=False),
            warmup_timeout_s=5.0,
        )
        a = sched.replicas[0]
        acq = Acquirer(sched)
        acq.submit(ticket("l1", prefix_key="P"))
        await settle()
        acq.release("l1", ok=False)
        assert a.avoids("P")
        await asyncio.sleep(AVOID_S + 1)
        assert not a.avoids("P")
        acq.submit(ticket("l2", prefix_key="P"))  # A: the least loaded, P cold there
        await settle()
        assert acq.grants["l2"].replica is a and acq.grants["l2"].leader
        await asyncio.sleep(AVOID_S + 6)  # past the warm-up timeout, still streaming
        assert a.avoids("P")
        acq.release("l2", ok=None)
        await asyncio.sleep(AVOID_S - 1)
        assert a.avoids("P")
        await asyncio.sleep(2)
        assert not a.avoids("P")
        acq.submit(ticket("l3", prefix_key="P"))
        await settle()
        await asyncio.sleep(6)
        assert a.avoids("P")
        acq.release("l3", ok=True)  # it answered after all: P is warm on A
        assert not a.avoids("P") and sched._warm["P", "A"] == 2
        await sched.aclose()

    run_virtual(main())


def test_followers_go_to_a_busy_healthy_replica_while_the_leader_hangs() -> None:
    """The healthy replica streams two long answers of another agent; the leader of the
    shared prefix hangs on the silent one. After the warm-up timeout every follower goes
    to the healthy one (one leads, the rest follow its first token), none to the silent
    one, all before the leader's idle timeout ends."""
    events: list[str] = []

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        events.append("silent")
        writer.write(head())
        await writer.drain()
        await reader.read()  # until the client gives up on it
        events.append("silent closed")

    async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        events.append("healthy")
        writer.write(head())
        for i in range(60):
            writer.write(chunk(content(f"w{i} ")))
            await writer.drain()
            await asyncio.sleep(1.0)
        writer.write(chunk(content(None, "stop")) + chunk(b"data: [DONE]\n\n") + chunk(b""))
        await writer.drain()

    async def main() -> None:
        async with raw_server(ok) as healthy, raw_server(hang) as silent:
            replicas = [
                Replica(transport=HTTPTransport(srv.base_url, clock=loop_clock), name=name)
                for name, srv in (("healthy", healthy), ("silent", silent))
            ]
            fleet = Fleet(replicas, clock=loop_clock, probe_slots=False)
            sessions = [OTHER.session("x0"), SHARED.session("q0"), OTHER.session("x1")]
            sessions += [SHARED.session(f"q{i}") for i in range(1, 5)]
            result = await fleet.run(sessions)
        assert all(s.ok for s in result.sessions)

    run_virtual(main())
    closed = events.index("silent closed")
    assert events[:closed].count("silent") == 1  # the leader only
    assert events[:closed].count("healthy") == 2 + 4  # the long streams, every follower
    assert events[closed + 1 :] == ["healthy"]  # the leader's retry
