"""When a replica shares a prefilled prefix: at the leader's first token (vLLM, SGLang,
the default) or at its end (``Replica(prefix_shared_at="end")``: llama.cpp).

llama.cpp caches a prefix in the slot that computed it: a follower sent at the leader's
first token lands in another slot and prefills the whole prefix again (0 cached tokens);
one sent once the leader ended reuses its slot's cache.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, ConfigError, Fleet, HTTPTransport, Replica, TurnTrace
from agentflow.embedded import loop_clock, run_virtual
from agentflow.sched import Scheduler
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaKind, DeltaSink, Transport
from tests.sched.conftest import Acquirer, IdleTransport, settle, ticket

SHARED = Agent(name="shared", model="m", instructions="A long shared system prompt. " * 50)


class _Logged:
    """Logs each request's start, first delta and end, by session."""

    def __init__(self, inner: Transport, events: list[tuple[str, str]]) -> None:
        self.inner, self.events = inner, events

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        sid = request.headers.get("X-Session-ID", "?")
        self.events.append(("start", sid))
        first = [True]

        class Sink:
            def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
                if first[0]:
                    first[0] = False
                    events.append(("first", sid))
                if sink is not None:
                    sink.on_delta(kind, text, t_ns)

        events = self.events
        trace = await self.inner.stream(request, Sink())
        self.events.append(("end", sid))
        return trace

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _run(shared_at: str) -> list[tuple[str, str]]:
    slow = Reply(frames=Reply.text(" ".join(["w"] * 20)).frames, frame_delay_s=0.01)
    events: list[tuple[str, str]] = []
    async with ScriptedServer([slow] * 4) as srv, HTTPTransport(srv.base_url) as http:
        replica = Replica(transport=_Logged(http, events), prefix_shared_at=shared_at)  # type: ignore[arg-type]
        result = await Fleet(replica, max_concurrency=8).run(
            SHARED.session(f"task {i}") for i in range(4)
        )
    assert all(s.ok for s in result.sessions)
    return events


async def test_at_the_end_followers_start_once_the_leader_ended() -> None:
    events = await _run("end")
    leader = events[0][1]
    ended = events.index(("end", leader))
    assert events[: ended + 1] == [("start", leader), ("first", leader), ("end", leader)]
    assert [kind for kind, _ in events].count("start") == 4


async def test_at_the_first_token_followers_start_while_the_leader_streams() -> None:
    events = await _run("first_token")
    leader = events[0][1]
    ended = events.index(("end", leader))
    assert [kind for kind, _ in events[:ended]].count("start") == 4


def _shared_at_end(stream_s: float | None) -> list[str]:
    """A leader on a replica that shares at the end (warm-up timeout 5 s) has its first
    token, then a delta every second for ``stream_s`` (``None``: none), then nothing; it
    ends at 30 s (virtual). The grants in order, ``|`` at the leader's end."""

    async def main() -> list[str]:
        replica = Replica(transport=IdleTransport("A"), name="A", prefix_shared_at="end")
        sched = Scheduler([replica], clock=loop_clock, warmup_timeout_s=5.0)
        acq = Acquirer(sched)
        acq.submit(ticket("lead", prefix_key="P"))
        acq.submit(ticket("f", prefix_key="P"))
        await settle()
        lead = acq.grants["lead"]
        lead.deltas += 1  # (what the runner's sink counts)
        sched.leader_token("P", sched.replicas[0], lead)
        for _ in range(int(stream_s or 0)):
            await asyncio.sleep(1.0)  # virtual time
            lead.deltas += 1
        await asyncio.sleep(30.0 - (stream_s or 0))
        order = [*acq.order, "|"]
        acq.release("lead")
        await settle()
        order += acq.order[len(order) - 1 :]
        await sched.aclose()
        return order

    return run_virtual(main())


def test_a_streaming_leader_holds_its_followers_past_the_timeout_when_shared_at_the_end() -> None:
    """A leader that streams is alive: on a replica that shares at the end, its
    followers wait for its end, past the warm-up timeout."""
    assert _shared_at_end(29.0) == ["lead", "|", "f"]


@pytest.mark.parametrize("stream_s", [None, 12.0])
def test_a_leader_stalled_after_its_first_token_releases_its_followers(
    stream_s: float | None,
) -> None:
    """A leader silent for the warm-up timeout after its first token (or after it
    streamed a while) stalled: its followers go without it. The first token used to end
    the timeout, and they waited for the leader's whole idle timeout."""
    assert _shared_at_end(stream_s) == ["lead", "f", "|"]


def test_prefix_shared_at_is_checked() -> None:
    with pytest.raises(ConfigError, match="prefix_shared_at"):
        Replica(transport=IdleTransport(), prefix_shared_at="never")  # type: ignore[arg-type]
