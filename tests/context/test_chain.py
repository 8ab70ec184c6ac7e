"""The context seam as a chain (issue 17, part 3): ``Agent(context=[...])`` of links.

- A chain of FleetBudget, ContextBudget and CacheBusterCheck on the simulator, over real
  HTTP, does what the old single ``ContextBudget(fleet=..., cache_buster=...)`` did: the same
  context events, transcripts and PromptInfo, turn for turn.
- Order matters where it should: a fleet budget first refuses a spent turn before the
  budget trims anything; after the budget it checks the trimmed prompt. ``after_turn``
  runs in reverse, so the first link is charged last.
- A user's own link (a small class) runs in the chain; its messages rewrite is sent.
- The old spellings warn and still work; a link and an argument for the same thing, a link
  given twice, a prefix index without a budget before it, are ConfigErrors naming both.
- Agents with a chain pickle (``Fleet(workers=N)`` sends them to worker processes).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from agentflow import Agent, BudgetExceeded, ConfigError, Fleet, PromptInfo, TurnTrace
from agentflow.context import (
    CacheBusterCheck,
    Compact,
    ContextBudget,
    ContextChain,
    DropOldest,
    FleetBudget,
    PrefixIndex,
    Prices,
)
from agentflow.typing import Complete, ContextLink, ContextPolicy

from .budget_util import Completer, ReadFile, conversation, sim_agent, simulator, trace

PRICES = Prices(prompt=1.0, cached=0.1, output=4.0)
CONTEXT_EVENTS = {"budget", "context_trimmed", "compaction", "cache_buster"}


def stamped_task(i: int) -> list[dict[str, Any]]:
    """A session whose system message carries its start time: a cache buster across sessions."""
    stamp = (datetime(2026, 3, 1, 9, 30) + timedelta(minutes=i)).isoformat()
    return [
        {"role": "system", "content": f"You fix bugs. Session started {stamp}."},
        {"role": "user", "content": f"Fix bug {i} in cache.py"},
    ]


def projected(event: Any) -> dict[str, Any]:
    """An event's fields, without the timings a trace carries (they differ run to run)."""
    out = {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        out[f.name] = value.usage if isinstance(value, TurnTrace) else value
    return out


async def run(context: Any, sessions: int = 3) -> tuple[list[Any], list[Any], list[Any]]:
    """Sessions one at a time (deterministic order) on the simulator: their context events,
    transcripts and every turn's PromptInfo."""
    events: list[Any] = []
    async with simulator() as (_, transport):
        agent = sim_agent(context, ReadFile([], 250), rounds=5)
        agent = dataclasses.replace(agent, instructions="")  # the task brings the system message
        fleet = Fleet(transport, max_concurrency=1, callbacks=[events.append])
        result = await fleet.run(
            agent.session(stamped_task(i), session_id=f"s{i}") for i in range(sessions)
        )
    ctx_events = [projected(e) for e in events if e.type in CONTEXT_EVENTS]
    transcripts = [s.messages for s in result.sessions]
    prompts = [[t.prompt for t in s.turns] for s in result.sessions]
    assert all(s.status == "completed" for s in result.sessions), [s.error for s in result.sessions]
    return ctx_events, transcripts, prompts


def budget() -> ContextBudget:
    return ContextBudget(
        window=1800,
        reserve_output=48,
        margin=0,
        overflow=[Compact(keep_last=1), DropOldest()],
        pin_first=1,
    )


async def test_a_chain_of_three_links_does_what_the_single_budget_did() -> None:
    with pytest.warns(DeprecationWarning, match="is deprecated") as warned:
        old = ContextBudget(
            window=1800,
            reserve_output=48,
            margin=0,
            overflow=[Compact(keep_last=1), DropOldest()],
            pin_first=1,
            fleet=FleetBudget(max_tokens=200_000, prices=PRICES, warn_at=(0.01, 0.02, 0.05)),
            cache_buster=CacheBusterCheck(),
        )
    assert [str(w.message).split(" is deprecated")[0] for w in warned] == [
        "ContextBudget(fleet=...)",
        "ContextBudget(cache_buster=CacheBusterCheck(...))",
    ]
    fleet = FleetBudget(max_tokens=200_000, prices=PRICES, warn_at=(0.01, 0.02, 0.05))
    check = CacheBusterCheck()
    new = [fleet, budget(), check]
    old_events, old_transcripts, old_prompts = await run(old)
    new_events, new_transcripts, new_prompts = await run(new)
    kinds = {e["type"] for e in new_events}
    assert {"budget", "context_trimmed", "cache_buster"} <= kinds  # every link acted
    assert new_events == old_events
    assert new_transcripts == old_transcripts
    assert new_prompts == old_prompts
    assert all(p is not None for turns in new_prompts for p in turns)
    assert old.fleet is not None and (fleet.tokens, fleet.cost, fleet.requests) == (
        old.fleet.tokens,
        old.fleet.cost,
        old.fleet.requests,
    )
    assert old.cache_buster is not None and check.busts == old.cache_buster.busts > 0


async def test_the_default_check_runs_unless_the_chain_has_one() -> None:
    """``ContextBudget()`` alone still checks for cache busters (as it always did); with a
    check link the link is the only check; ``cache_buster=False`` turns it off."""
    alone = ContextBudget(window=100_000, reserve_output=48)
    events, _, _ = await run(alone, sessions=2)
    assert [e["kind"] for e in events if e["type"] == "cache_buster"] == ["timestamp"]
    assert alone.cache_buster is not None and alone.cache_buster.busts == 1
    mine = CacheBusterCheck()
    replaced = ContextBudget(window=100_000, reserve_output=48)
    chain = ContextChain([replaced, mine])
    assert chain.links == (replaced, mine)
    events, _, _ = await run(chain, sessions=2)
    assert [e["kind"] for e in events if e["type"] == "cache_buster"] == ["timestamp"]
    assert mine.busts == 1  # the link reported the bust: the budget's own check ran not
    assert replaced.cache_buster is not None and replaced.cache_buster.busts == 0
    off = ContextBudget(window=100_000, reserve_output=48, cache_buster=False)
    events, _, _ = await run(off, sessions=2)
    assert not [e for e in events if e["type"] == "cache_buster"]


def bind(links: Sequence[Any], events: list[Any]) -> Any:
    return ContextChain(links).bind(
        session_id="s", agent="a", emit=events.append, model="m", params={}
    )


async def never(request: Any) -> Any:
    raise AssertionError("no model call expected")


async def test_a_fleet_budget_first_refuses_before_the_budget_trims() -> None:
    spent = FleetBudget(max_tokens=10)
    spent.charge(trace(prompt=10, output=1), model="m", agent="a", session_id="x", turn=0,
                 emit=lambda e: None)  # fmt: skip
    small: dict[str, Any] = {
        "window": 500,
        "reserve_output": 10,
        "margin": 0,
        "overflow": DropOldest(),
    }
    first: list[Any] = []
    with pytest.raises(BudgetExceeded):
        await bind([spent, ContextBudget(**small)], first).before_turn(
            0, conversation(6), (), never
        )
    assert first == []  # refused before anything was trimmed
    after: list[Any] = []
    with pytest.raises(BudgetExceeded):
        await bind([ContextBudget(**small), spent], after).before_turn(
            0, conversation(6), (), never
        )
    assert [e.type for e in after] == ["context_trimmed"]  # trimmed, then refused


class Recorder:
    """A user's link: it records the calls made to its sessions, and one of them adds a
    line to the system message (a rewrite the budget then counts)."""

    def __init__(self, name: str, calls: list[str], *, note: str | None = None) -> None:
        self.name, self.calls, self.note = name, calls, note

    def bind(self, **kw: Any) -> RecorderSession:
        return RecorderSession(self)


class RecorderSession:
    def __init__(self, link: Recorder) -> None:
        self.link = link

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        self.link.calls.append(f"before {self.link.name} {turn}")
        if self.link.note is not None and turn == 0:
            messages[0] = {**messages[0], "content": f"{messages[0]['content']} {self.link.note}"}
        return None

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        self.link.calls.append(f"after {self.link.name} {turn}")


async def test_a_users_link_runs_in_order_and_its_rewrite_is_sent() -> None:
    calls: list[str] = []
    links: list[ContextLink] = [
        Recorder("a", calls, note="Answer in English."),
        ContextBudget(window=4096, reserve_output=48),
        Recorder("b", calls),
    ]
    async with simulator() as (_, transport):
        agent = sim_agent(links, ReadFile([], 20), rounds=1)
        assert isinstance(agent.context, ContextChain)
        result = await Fleet(transport).run([agent.session("Fix bug 1")])
    s = result.sessions[0]
    assert s.status == "completed" and len(s.turns) == 2
    assert calls == [
        "before a 0", "before b 0", "after b 0", "after a 0",
        "before a 1", "before b 1", "after b 1", "after a 1",
    ]  # fmt: skip
    assert s.messages[0]["content"].endswith("Answer in English.")
    # The budget's PromptInfo reaches the turn through the links after it that say nothing.
    assert all(t.prompt is not None and t.prompt.estimated_tokens > 0 for t in s.turns)
    # The user's class satisfies the one signature under both names.
    link: ContextPolicy = Recorder("c", [])
    assert link is not None and ContextPolicy is ContextLink


def test_a_chain_expands_a_budget_into_the_links_it_stands_for() -> None:
    index = PrefixIndex()
    chain = ContextChain([ContextBudget(window=100_000), index])
    assert [type(x).__name__ for x in chain.links] == [
        "ContextBudget",  # it runs its own default check: no link of its own
        "_PrefixLink",
    ]


async def test_a_prefix_index_link_fingerprints_with_the_budget_before_it() -> None:
    ctx = bind([ContextBudget(window=100_000, cache_buster=False), PrefixIndex()], [])
    msgs = conversation(2)
    first = await ctx.before_turn(0, msgs, (), never)
    assert first is not None and first.max_cacheable_tokens == 0
    ctx.after_turn(0, trace("done", prompt=first.estimated_tokens, output=1))
    msgs.append({"role": "assistant", "content": "done"})
    second = await ctx.before_turn(1, msgs, (), never)
    assert second is not None and second.max_cacheable_tokens is not None
    assert second.max_cacheable_tokens >= 16  # what turn 0 sent is cacheable now


def test_old_spellings_and_links_for_the_same_thing_conflict() -> None:
    fleet = FleetBudget(max_tokens=100)
    with pytest.warns(DeprecationWarning, match=r"Agent\(context=\[FleetBudget"):
        with_fleet = ContextBudget(window=1000, fleet=fleet)
    with pytest.raises(ConfigError, match=r"FleetBudget link .*ContextBudget\(fleet="):
        Agent(name="a", model="m", context=[FleetBudget(max_tokens=5), with_fleet])
    with pytest.raises(ConfigError, match=r"CacheBusterCheck link .*cache_buster=True"):
        ContextChain([ContextBudget(window=1000, cache_buster=True), CacheBusterCheck()])
    with pytest.raises(ConfigError, match=r"CacheBusterCheck link .*cache_buster=False"):
        ContextChain([ContextBudget(window=1000, cache_buster=False), CacheBusterCheck()])
    with pytest.warns(
        DeprecationWarning, match=r"Agent\(context=\[ContextBudget\(\.\.\.\), Prefix"
    ):
        with_index = ContextBudget(window=1000, prefix_index=PrefixIndex())
    with pytest.raises(ConfigError, match=r"prefix index link .*prefix_index="):
        ContextChain([with_index, PrefixIndex()])
    with pytest.raises(ConfigError, match=r"needs a ContextBudget before it"):
        ContextChain([PrefixIndex(), ContextBudget(window=1000)])
    with pytest.raises(ConfigError, match=r"in the chain twice"):
        ContextChain([fleet, ContextBudget(window=1000), fleet])
    with pytest.raises(ConfigError, match=r"Agent 'a': context\[1\]: 42 is not a context link"):
        Agent(name="a", model="m", context=[ContextBudget(window=1000), 42])
    # The old spelling alone still charges the budget it names, first in its chain.
    assert ContextChain([with_fleet]).links[0] is fleet
    assert ContextChain([with_fleet]).fleet is fleet


def test_agents_with_a_chain_pickle() -> None:
    agent = Agent(
        name="a",
        model="m",
        context=[FleetBudget(max_tokens=100), ContextBudget(window=1000), CacheBusterCheck()],
    )
    copy = pickle.loads(pickle.dumps(agent))
    assert isinstance(copy.context, ContextChain)
    assert [type(x).__name__ for x in copy.context.links] == [
        "FleetBudget",
        "ContextBudget",
        "CacheBusterCheck",
    ]
    assert copy.context.fleet is not None and copy.context.fleet.max_tokens == 100


async def test_a_compaction_that_spends_the_fleet_budget_stops_the_turn() -> None:
    """The fleet budget checks a compaction's summary request before it is sent, charges
    it, and checks again once every link is done: the summary spent it, so the turn is
    refused (as the old ``ContextBudget(fleet=)`` did)."""
    fleet = FleetBudget(max_tokens=100)
    events: list[Any] = []
    budget = ContextBudget(window=600, reserve_output=50, margin=0, overflow=Compact(keep_last=1))
    ctx = bind([fleet, budget], events)
    completer = Completer("s")
    with pytest.raises(BudgetExceeded):
        await ctx.before_turn(0, conversation(6, output_words=120), (), completer)
    assert len(completer.requests) == 1 and fleet.requests == 1 and fleet.tokens == 101
    assert [e.type for e in events] == ["budget", "budget", "budget", "budget", "compaction",
                                        "context_trimmed"]  # fmt: skip
    with pytest.raises(BudgetExceeded):  # and a spent budget sends no summary at all
        await ctx.before_turn(1, conversation(6, output_words=120), (), never)
