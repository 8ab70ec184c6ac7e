"""A compaction's summary request that is retried reports the retry: a ``RetryEvent`` for
the turn it runs before, as ``FleetResult.retries`` counts it. It used to be counted there
but reported by no event, so a live ``FleetStats`` (and any callback) missed it."""

from __future__ import annotations

from agentflow import Agent, Fleet, RetryPolicy
from agentflow.context import Compact, ContextBudget, Fail
from agentflow.stats import FleetStats
from agentflow.testing import MockTransport, Reply, capture_events
from agentflow.transport import ChatRequest


def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return "lorem ipsum dolor " * 40


def _prompt_tokens(request: ChatRequest) -> int:
    return sum(len(str(m.get("content") or "")) for m in request.messages) // 4 + 40


async def test_a_retried_compaction_request_is_a_retry_event() -> None:
    summaries: list[int] = []

    def handler(request: ChatRequest) -> Reply:
        if not request.tools:  # the compaction's summary request (no tools)
            summaries.append(1)
            if len(summaries) == 1:
                return Reply.error(500, "transient")
            return Reply.text("a short summary")
        tokens = _prompt_tokens(request)
        if sum(m["role"] == "tool" for m in request.messages) < 5:
            return Reply.tool_call("read_file", {"path": "a"}, prompt_tokens=tokens)
        return Reply.text("done", prompt_tokens=tokens)

    events = capture_events()
    live = FleetStats()
    agent = Agent(
        name="a",
        model="m",
        tools=[read_file],
        params={"max_tokens": 16},
        context=ContextBudget(window=700, overflow=[Compact(keep_last=1), Fail()]),
    )
    fleet = Fleet(
        MockTransport(handler),
        callbacks=[events, live],
        retry=RetryPolicy(max_attempts=3, backoff_s=0.001, jitter=False),
    )
    result = await fleet.run([agent.session("go")])

    [retry] = events.of_type("retry")
    assert result.retries == 1 == live.report()["fleet"]["retries"]
    assert retry.attempt.attempt == 0 and "transient" in str(retry.attempt.error)
    compactions = events.of_type("compaction")
    assert compactions and compactions[0].turn == retry.turn
    types = [e.type for e in events if getattr(e, "turn", None) == retry.turn]
    assert types.index("retry") < types.index("compaction")
    assert "attempt_discarded" not in types  # that request streams no tokens
