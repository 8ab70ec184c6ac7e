"""The budget's change check stays a pointer comparison as a session's history grows.

With the documented chain ``[ContextBudget(...), PrefixIndex()]`` the prefix tracker
counts each turn's prompt followed by its reply — a dict built from the trace — with the
budget's own :class:`PromptCounter`, before the session appends a dict of its own for the
same reply. The counter used to keep the tracker's copy as its snapshot, so every past
reply was compared by value on every later turn (twice a turn): a cost growing with the
history. Checked by object identity (``count_of`` knows a message only by the object it
holds), never timed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentflow import Agent, HTTPTransport
from agentflow._context_chain import Binding, Link, LinkSession
from agentflow._trace import PromptInfo
from agentflow.context import ContextBudget, MessageCounter, PrefixIndex, TiktokenCounter
from agentflow.context._session_budget import SessionBudget
from agentflow.testing import Reply, ScriptedServer
from agentflow.typing import Complete

TURNS = 8


def look(i: int) -> str:
    """Return a line about ``i``."""
    return f"item {i} is {i * 7919 % 1000}"


class _ProbeSession(LinkSession):
    """After the budget's ``before_turn``: which of the session's messages the budget's
    counter does not hold as the very object (by index), turn by turn."""

    def __init__(self, at: Binding, seen: list[list[int]]) -> None:
        super().__init__(at)
        self.seen = seen
        self.budget: SessionBudget | None = None

    def join(self, sessions: Sequence[object]) -> None:
        (self.budget,) = [s for s in sessions if isinstance(s, SessionBudget)]

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        assert self.budget is not None
        counter = self.budget._est.counter
        self.seen.append([i for i, m in enumerate(messages) if counter.count_of(m) is None])
        return None


class _Probe(Link[_ProbeSession]):
    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def session_for(self, at: Binding) -> _ProbeSession:
        return _ProbeSession(at, self.seen)


async def test_the_budget_holds_the_sessions_own_replies() -> None:
    """Every turn, every message of the history — the replies the session appended
    included — is held by the budget's counter as the session's own object."""
    probe = _Probe()
    agent = Agent(
        name="a",
        model="m",
        tools=[look],
        max_turns=TURNS + 1,
        context=[ContextBudget(window=100_000), PrefixIndex(), probe],
    )
    replies = [Reply.tool_call("look", {"i": i}, call_id=f"call_{i}") for i in range(TURNS)]
    async with (
        ScriptedServer([*replies, Reply.text("done")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        result = await agent.session("go").run(http)
        srv.assert_complete()
    assert result.ok
    assert len(probe.seen) == TURNS + 1
    assert probe.seen == [[]] * (TURNS + 1)


def test_an_equal_copy_is_replaced_by_the_callers_object() -> None:
    """A message counted as a copy (the tracker's reply) is taken as the caller's own
    object at the next count, with its count kept; the copy is forgotten."""
    counter = MessageCounter(TiktokenCounter()).session()
    user = {"role": "user", "content": "go"}
    reply = {"role": "assistant", "content": "ok"}
    copy = dict(reply)
    counter.count([user, copy])
    n = counter.count_of(copy)
    assert n is not None
    tool = {"role": "user", "content": "more"}
    total = counter.count([user, reply, tool])
    assert counter.first_changed == 2  # equal by value: not counted again
    assert counter.count_of(reply) == n
    assert counter.count_of(copy) is None
    assert total == MessageCounter(TiktokenCounter()).count_prompt([user, reply, tool])


def test_after_a_rewrite_only_the_messages_counted_anew_are_checked_next() -> None:
    """A rewrite near the start finds the kept history by ``id``: the next count checks
    only the messages that rewrite had to count, not the whole history again (one
    pointer check per kept message per rewrite turn, a cost growing with the history)."""
    counter = MessageCounter(TiktokenCounter()).session()
    history = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    counter.count(history)
    summary = {"role": "user", "content": "a summary"}
    rewritten = [summary, *history[10:]]  # the session's own objects after the summary
    counter.count(rewritten)
    assert counter.first_changed == 0
    assert counter._fresh == [0]  # only the summary was new
    reply = {"role": "assistant", "content": "ok"}
    total = counter.count([*rewritten, dict(reply)])
    assert counter._fresh == [len(rewritten)]
    assert total == MessageCounter(TiktokenCounter()).count_prompt([*rewritten, reply])
