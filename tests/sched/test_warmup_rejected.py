"""A prefix's leader answered with a 429 (or another 4xx that does not blame its replica)
before its first token prefilled nothing: the prefix stays cold, and of the requests
parked behind it one leads anew, the rest waiting for that one.

Such a leader used to mark the prefix warm and release every follower at once: each
prefilled the whole prefix from scratch, side by side, and none led.
"""

from __future__ import annotations

import asyncio

import pytest

from agentflow import Agent, Fleet, HTTPTransport, Replica, RetryPolicy, TurnTrace
from agentflow.embedded import loop_clock, run_virtual
from agentflow.testing import Reply, ScriptedServer
from agentflow.transport import ChatRequest
from agentflow.typing import DeltaKind, DeltaSink, Transport
from tests.wait import GUARD_S

SHARED = Agent(name="shared", model="m", instructions="A long shared system prompt. " * 50)


class _Logged:
    """Logs each request's start, first delta and end (``"end"``, or the status of an
    error answer), by session."""

    def __init__(self, inner: Transport, events: list[tuple[str, str]]) -> None:
        self.inner, self.events = inner, events

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        sid = request.headers.get("X-Session-ID", "?")
        events = self.events
        events.append(("start", sid))
        first = [True]

        class Sink:
            def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
                if first[0]:
                    first[0] = False
                    events.append(("first", sid))
                if sink is not None:
                    sink.on_delta(kind, text, t_ns)

        try:
            trace = await self.inner.stream(request, Sink())
        except Exception as exc:
            events.append((str(getattr(exc, "status", "error")), sid))
            raise
        events.append(("end", sid))
        return trace

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize(("shared_at", "released_at"), [("first_token", "first"), ("end", "end")])
def test_a_leader_rejected_with_a_429_leaves_the_prefix_cold(
    shared_at: str, released_at: str
) -> None:
    """Three sessions of one prefix on one replica: the leader's request is answered 429.
    Then one request leads anew, alone until its first token (``"end"``: its end)."""
    slow = Reply(frames=Reply.text(" ".join(["w"] * 10)).frames, frame_delay_s=0.1)

    async def main() -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        replies = [Reply.error(429, "busy"), slow, slow, slow]
        async with (
            ScriptedServer(replies) as srv,
            HTTPTransport(srv.base_url, clock=loop_clock) as http,
        ):
            replica = Replica(
                transport=_Logged(http, events),
                prefix_shared_at=shared_at,  # type: ignore[arg-type]
            )
            fleet = Fleet(
                replica,
                max_concurrency=3,
                clock=loop_clock,
                probe_slots=False,
                retry=RetryPolicy(backoff_s=0.05, jitter=False),
            )
            result = await asyncio.wait_for(
                fleet.run(SHARED.session(f"task {i}", session_id=f"s{i}") for i in range(3)),
                GUARD_S,
            )
            srv.assert_complete()
        assert all(s.ok for s in result.sessions), [s.error for s in result.failed]
        return events

    events = run_virtual(main())
    rejected = next(i for i, (kind, _) in enumerate(events) if kind == "429")
    assert events[0] == ("start", events[rejected][1])  # the leader
    after = events[rejected + 1 :]
    kind, lead = after[0]
    assert kind == "start"
    released = after.index((released_at, lead))
    # Nobody started beside the new leader until it had warmed the prefix.
    assert [k for k, _ in after[1:released]].count("start") == 0, events
    assert [k for k, _ in events].count("start") == 4
