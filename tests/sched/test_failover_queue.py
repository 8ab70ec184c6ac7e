"""A failover retry at the head of the queue does not stall the queue.

Two replicas of one request each. The urgent session's first attempt fails on ``r1``; its
retry excludes ``r1`` and ranks first, while ``r2`` streams a long answer. Excluding a
replica is a preference among the replicas with room, so the retry goes back to ``r1`` as
soon as ``r1`` has room, and the turns queued behind it follow — instead of all of them
waiting for ``r2``'s long stream to end while ``r1`` sits idle.

Run on :func:`~agentflow.embedded.run_virtual` with :class:`MockTransport` replicas:
assertions are on the order of events (which request reached which replica, which
session ended before which), not on durations.
"""

from __future__ import annotations

import asyncio
import dataclasses

from agentflow import Agent, Fleet, Limits, Replica, RetryPolicy
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest


def test_a_failover_retry_uses_the_idle_replica_it_excludes() -> None:
    seen: list[tuple[str, str]] = []  # (replica, task) in arrival order

    def handler(name: str) -> MockTransport:
        def reply(request: ChatRequest) -> Reply:
            task = request.messages[-1]["content"]
            seen.append((name, task))
            if task == "X" and len(seen) == 1:  # its first attempt fails
                return Reply.error(500, "transient")
            if task == "LONG":
                return dataclasses.replace(Reply.text("y" * 10, pieces=10), frame_delay_s=1.0)
            return dataclasses.replace(Reply.text("zzzzz", pieces=5), frame_delay_s=0.1)

        return MockTransport(reply, clock=loop_clock, endpoint=f"mock://{name}")

    async def main() -> dict[str, int]:
        replicas = [
            Replica(transport=handler(n), name=n, limits=Limits(max_in_flight=1))
            for n in ("r1", "r2")
        ]
        fleet = Fleet(
            replicas,
            policy="priority",
            clock=loop_clock,
            sleep=asyncio.sleep,
            prefix_warmup=False,
            retry=RetryPolicy(jitter=False, backoff_s=0.1),
            probe_slots=False,
        )
        urgent, normal = Agent(name="x", model="m", priority=1), Agent(name="n", model="m")
        sessions = [urgent.session("X"), normal.session("LONG")]
        sessions += [normal.session(f"Z{i}") for i in range(4)]
        result = await fleet.run(sessions)
        assert all(s.ok for s in result.sessions)
        ends = {}
        for s in result.sessions:
            assert s.end_ns is not None
            ends[s.messages[0]["content"]] = s.end_ns
        return ends

    ended = run_virtual(main())
    assert seen[:3] == [("r1", "X"), ("r2", "LONG"), ("r1", "Z0")]
    # The retry excluded r1, and r2 was busy with LONG: it went back to r1 ...
    assert seen[3] == ("r1", "X")
    # ... and the queue behind it kept moving on r1 while LONG streamed on r2.
    assert all(ended[t] < ended["LONG"] for t in ("X", "Z0", "Z1", "Z2", "Z3"))
