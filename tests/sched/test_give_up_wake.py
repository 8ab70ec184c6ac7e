"""A retry wait chosen while the fleet was serving, still going when ``give_up_after_s``
has passed, ends as soon as the fleet goes down — not at the end of the wait.

docs/reliability.md promises a turn never goes on later than ``give_up_after_s`` while
every replica is down. The runner used to check the fleet's state once, at the limit, and
sleep out the rest: a 429 with ``Retry-After: 250`` at t=0, the fleet down at ~160 s, and
the turn ended at 250 s (limit 120 s). On the virtual clock, so the times are exact.
"""

from __future__ import annotations

import asyncio
import dataclasses

from agentflow import Agent, AllReplicasDown, Fleet, RetryPolicy
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import MockTransport, Reply
from agentflow.transport import ChatRequest

LIMIT_S = 120.0
RETRY_AFTER_S = 250.0
DIES_AT_S = 125.0  # from then on the server answers 503 to everything


def test_a_wait_past_the_limit_ends_when_the_fleet_goes_down() -> None:
    seen: list[tuple[float, str, int]] = []  # (time, session's prompt, status answered)

    async def main() -> tuple[float, dict[str, tuple[BaseException | None, float]]]:
        loop = asyncio.get_running_loop()
        start = loop.time()

        def answer(request: ChatRequest) -> Reply:
            now = loop.time() - start
            who = request.messages[-1]["content"]
            if now >= DIES_AT_S:
                seen.append((now, who, 503))
                return Reply.error(503, "down")
            if who == "A":  # a healthy server asking A to come back much later
                seen.append((now, who, 429))
                return Reply.error(429, "slow down", headers={"Retry-After": f"{RETRY_AFTER_S:g}"})
            seen.append((now, who, 200))
            # The B sessions stream until the server dies under them (cut at ~126 s).
            text = Reply.text("a b c d e f g h i j k l m", pieces=13)
            return dataclasses.replace(text, frame_delay_s=10.0, cut=True)

        fleet = Fleet(
            MockTransport(answer, clock=loop_clock),
            clock=loop_clock,
            probe_slots=False,
            prefix_warmup=False,
            retry=RetryPolicy(jitter=False, give_up_after_s=LIMIT_S),
        )
        agent = Agent(name="a", model="m")
        result = await fleet.run([agent.session("A")] + [agent.session(f"B{i}") for i in range(6)])
        ends = {}
        for s in result.sessions:
            assert s.end_ns is not None
            ends[s.messages[0]["content"]] = (s.error, s.end_ns / 1e9 - start)
        return start, ends

    _, ends = run_virtual(main())
    error, a_end = ends["A"]
    assert isinstance(error, AllReplicasDown)
    a_tries = [t for t, who, _ in seen if who == "A"]
    assert len(a_tries) == 2 and a_tries[0] == 0.0
    last = a_tries[1]
    # Not at the end of the Retry-After: when the fleet went down, past the limit — at
    # the instant of a failure (a 503 to another session), which is what takes it down.
    assert LIMIT_S <= last < RETRY_AFTER_S
    assert any(t == last and who != "A" and status == 503 for t, who, status in seen)
    assert a_end == last
    # Every session ended with the fleet down, none later than A's last attempt.
    for name, (err, end) in ends.items():
        assert isinstance(err, AllReplicasDown), (name, err)
        assert end <= last
