"""On replicas that share a prefix only at a request's end (``prefix_shared_at="end"``:
llama.cpp), a prefix's leader that stalls after its first token does not hold its
followers for its whole idle timeout: silent for the warm-up timeout, it releases them,
and they go to a replica with room.

The first token used to end the warm-up timeout: a leader that streamed one token and went
silent kept every follower parked behind it for its idle timeout (300 s by default) while
another replica sat idle.
"""

from __future__ import annotations

import asyncio

from agentflow import Agent, Fleet, HTTPTransport, Replica
from agentflow.embedded import loop_clock, run_virtual
from tests.transport.rawserver import chunk, content, head, raw_server
from tests.wait import GUARD_S

SHARED = Agent(name="a", model="m", instructions="You are a helpful agent. " * 20)
TIMEOUT_S = 2.0


def test_a_leader_stalled_after_its_first_token_releases_its_followers_elsewhere() -> None:
    """Four sessions of one prefix on two replicas that share at the end: the leader, on
    A, streams one token and goes silent. The followers all run on B, each before the
    leader gives up, the first within two warm-up timeouts of the leader's token."""
    events: list[tuple[str, float]] = []

    def note(what: str) -> None:
        events.append((what, asyncio.get_running_loop().time()))

    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if any(what == "A token" for what, _ in events):  # (the leader's retry)
            await streams(reader, writer, "A")
            return
        writer.write(head() + chunk(content("w0 ")))
        await writer.drain()
        note("A token")
        await reader.read()  # until the client gives up on it
        note("A closed")

    async def streams(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str
    ) -> None:
        note(f"{name} start")
        writer.write(head())
        for i in range(3):
            writer.write(chunk(content(f"w{i} ")))
            await writer.drain()
            await asyncio.sleep(0.5)
        writer.write(chunk(content(None, "stop")) + chunk(b"data: [DONE]\n\n") + chunk(b""))
        await writer.drain()

    async def b(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await streams(reader, writer, "B")

    async def main() -> None:
        async with raw_server(stalls) as a_srv, raw_server(b) as b_srv:
            replicas = [
                Replica(
                    transport=HTTPTransport(srv.base_url, clock=loop_clock),
                    name=name,
                    prefix_shared_at="end",
                )
                for name, srv in (("A", a_srv), ("B", b_srv))
            ]
            fleet = Fleet(
                replicas,
                max_concurrency=4,
                clock=loop_clock,
                probe_slots=False,
                warmup_timeout_s=TIMEOUT_S,
            )
            run = fleet.run(SHARED.session(f"q{i}") for i in range(4))
            result = await asyncio.wait_for(run, GUARD_S * 10)  # (virtual seconds)
        assert all(s.ok for s in result.sessions), [s.error for s in result.failed]

    run_virtual(main())
    what = [w for w, _ in events]
    assert what[0] == "A token"
    closed = what.index("A closed")
    assert what[:closed].count("B start") == 3, what  # every follower, before the leader gave up
    token_at = events[0][1]
    first_b = next(at for w, at in events if w == "B start")
    assert TIMEOUT_S <= first_b - token_at <= 2 * TIMEOUT_S + 0.1  # (virtual time)
