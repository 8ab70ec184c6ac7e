"""Where the context events fall among a turn's events, and what docs/events.md says of
it. The reference said every context event comes before the turn it concerns is sent;
``budget`` and a measured ``cache_buster`` are counted from the turn's usage, so they
come after its last ``token``, before its ``turn_end``."""

from __future__ import annotations

import re
from pathlib import Path

from agentflow import Agent, Event, Fleet, HTTPTransport
from agentflow.context import CacheBusterCheck, FleetBudget
from agentflow.testing import Reply, ScriptedServer

DOC = (Path(__file__).parents[1] / "docs" / "events.md").read_text()


def _order(events: list[Event], session_id: str) -> list[str]:
    """The session's event types, a run of tokens as one ``token``."""
    out: list[str] = []
    for e in events:
        if getattr(e, "session_id", None) == session_id and not (
            e.type == "token" and out and out[-1] == "token"
        ):
            out.append(e.type)
    return out


async def test_budget_and_cache_buster_come_between_the_last_token_and_turn_end() -> None:
    budget = FleetBudget(max_tokens=100_000, warn_at=(0.0001,))
    check = CacheBusterCheck()
    events: list[Event] = []
    sessions = []
    for i, now in enumerate(("2024-01-01T10:00:00Z", "2024-01-01T10:05:17Z")):
        agent = Agent(
            name="a",
            model="m",
            instructions="You are a helpful assistant. " * 40 + f"Now: {now}. Be brief.",
            context=[budget, check],
        )
        sessions.append(agent.session("Same task.", session_id=f"s{i}"))
    reply = Reply.text("one two three", prompt_tokens=300, cached_tokens=0)
    async with ScriptedServer([reply, reply]) as srv, HTTPTransport(srv.base_url) as t:
        await Fleet(t, max_concurrency=1, callbacks=[events.append]).run(sessions)
    assert _order(events, "s0") == ["token", "budget", "turn_end", "session_end"]
    assert _order(events, "s1") == ["token", "cache_buster", "turn_end", "session_end"]
    [warning] = [e for e in events if e.type == "cache_buster"]
    assert warning.lost_source == "server"  # measured: hence after the turn


def test_the_reference_says_so() -> None:
    order = " ".join(DOC.split("## Order", 1)[1].split("\n## ", 1)[0].split())
    assert re.search(
        r"`context_trimmed` and `compaction` come before the turn they concern is sent", order
    )
    assert re.search(
        r"`budget` and `cache_buster` come after that turn's last `token`, before its `turn_end`",
        order,
    )
