"""``ContextBudget(prefix_index=...)`` is deprecated (issue 17, part 3: one way each): the way
is a :class:`PrefixIndex` link after the budget, ``Agent(context=[ContextBudget(...),
PrefixIndex(...)])``.

- The old spelling warns (a DeprecationWarning naming the chain spelling, at the caller's
  line: built directly, or through ``await ContextBudget.from_server(...)``).
- It still works, and does what the chain does: on the simulator over loopback, the same
  context events, transcripts, every turn's ``PromptInfo`` (``max_cacheable_tokens``
  included) and usage, and the index holds the same blocks; bound directly, the same
  ``PromptInfo`` turn for turn.
- Both spellings in one chain, or something that is not an index, are ConfigErrors.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any

import pytest

from agentflow import Agent, ConfigError, Fleet, PromptInfo, TurnTrace
from agentflow.context import (
    Compact,
    ContextBudget,
    ContextChain,
    DropOldest,
    PrefixIndex,
    SessionBudget,
)

from .budget_util import (
    SIM_PROFILE,
    ReadFile,
    bind_indexed,
    conversation,
    sim_agent,
    simulator,
    trace,
)

ARGS: dict[str, Any] = {
    "window": 1800,
    "reserve_output": 48,
    "margin": 0,
    "overflow": [Compact(keep_last=1), DropOldest()],
    "pin_first": 1,
}
CONTEXT_EVENTS = {"budget", "context_trimmed", "compaction", "cache_buster"}
NEW_SPELLING = (
    "Agent(context=[ContextBudget(...), PrefixIndex(...)]) "
    "(or ContextChain([ContextBudget(...), PrefixIndex(...)]))"
)


def old_spelling(index: PrefixIndex) -> ContextBudget:
    with pytest.warns(DeprecationWarning, match=r"ContextBudget\(prefix_index=\.\.\.\)"):
        return ContextBudget(**ARGS, prefix_index=index)


def test_the_old_spelling_warns_at_the_callers_line() -> None:
    index = PrefixIndex()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        budget = ContextBudget(window=1000, prefix_index=index)
    (w,) = warned
    assert w.category is DeprecationWarning
    assert str(w.message).startswith("ContextBudget(prefix_index=...) is deprecated")
    assert str(w.message).endswith(NEW_SPELLING)
    assert (w.filename, w.lineno) == (__file__, line)  # the caller's line, not agentflow's
    assert budget.prefix_index is index  # and it still takes the index


async def test_the_old_spelling_warns_at_the_callers_line_through_from_server() -> None:
    index = PrefixIndex()
    async with simulator() as (sim, _):
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
            budget = await ContextBudget.from_server(sim.base_url, prefix_index=index)
    (w,) = [w for w in warned if w.category is DeprecationWarning]
    assert str(w.message).endswith(NEW_SPELLING)
    assert (w.filename, w.lineno) == (__file__, line)
    assert budget.prefix_index is index
    assert budget.window_source.startswith("server ") and budget.window == SIM_PROFILE.max_model_len


def projected(event: Any) -> dict[str, Any]:
    """An event's fields, without the timings a trace carries (they differ run to run)."""
    out = {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        out[f.name] = value.usage if isinstance(value, TurnTrace) else value
    return out


@dataclasses.dataclass
class Run:
    events: list[dict[str, Any]]
    transcripts: list[list[dict[str, Any]]]
    prompts: list[list[PromptInfo | None]]
    usage: list[list[Any]]


async def run(context: Any, sessions: int = 3) -> Run:
    """Sessions one at a time (a deterministic order) on the simulator over loopback."""
    events: list[Any] = []
    async with simulator() as (_, transport):
        agent = sim_agent(context, ReadFile([], 250), rounds=5)
        fleet = Fleet(transport, max_concurrency=1, callbacks=[events.append])
        result = await fleet.run(
            agent.session(f"Fix bug {i} in cache.py", session_id=f"s{i}") for i in range(sessions)
        )
    assert all(s.status == "completed" for s in result.sessions), [s.error for s in result.sessions]
    return Run(
        events=[projected(e) for e in events if e.type in CONTEXT_EVENTS],
        transcripts=[s.messages for s in result.sessions],
        prompts=[[t.prompt for t in s.turns] for s in result.sessions],
        usage=[[t.trace.usage for t in s.turns] for s in result.sessions],
    )


async def test_the_old_spelling_does_what_the_chain_does_on_the_simulator() -> None:
    old_index = PrefixIndex()
    old = await run(old_spelling(old_index))
    new_index = PrefixIndex()
    new = await run([ContextBudget(**ARGS), new_index])  # as Agent(context=[...]) lists it
    assert {e["type"] for e in new.events} >= {"compaction", "context_trimmed"}  # budget acted
    # The index acted: from the second turn on, a session's prompt has cacheable tokens.
    cacheable = [p.max_cacheable_tokens for turns in new.prompts for p in turns[1:] if p]
    assert cacheable and all(c is not None and c > 0 for c in cacheable)
    assert new.events == old.events
    assert new.transcripts == old.transcripts
    assert new.prompts == old.prompts
    assert new.usage == old.usage
    assert (new_index.held_tokens, new_index.evicted_blocks) == (
        old_index.held_tokens,
        old_index.evicted_blocks,
    )
    assert old_index.held_tokens > 0
    # A ContextChain built by hand (to share between agents) is the same chain.
    chained = await run(ContextChain([ContextBudget(**ARGS), PrefixIndex()]))
    assert chained.prompts == old.prompts and chained.transcripts == old.transcripts


async def never(request: Any) -> Any:
    raise AssertionError("no model call expected")


async def test_bound_directly_the_old_spelling_says_what_the_chain_says() -> None:
    """``ContextBudget(prefix_index=...).bind()`` (no chain) still fingerprints, turn for
    turn as the chain ``[budget, index]`` bound for the session."""
    args: dict[str, Any] = {"window": 100_000, "cache_buster": False}
    with pytest.warns(DeprecationWarning, match="is deprecated"):
        old_budget = ContextBudget(**args, prefix_index=PrefixIndex())
    old = old_budget.bind(session_id="s", agent="a", emit=lambda e: None)
    assert isinstance(old, SessionBudget)
    new, _ = bind_indexed(ContextBudget(**args), PrefixIndex(), session_id="s")
    infos: list[tuple[PromptInfo | None, PromptInfo | None]] = []
    msgs_old, msgs_new = conversation(1), conversation(1)
    for turn in range(4):
        got_old = await old.before_turn(turn, msgs_old, (), never)
        got_new = await new.before_turn(turn, msgs_new, (), never)
        infos.append((got_old, got_new))
        for ctx, msgs, info in ((old, msgs_old, got_old), (new, msgs_new, got_new)):
            assert info is not None
            ctx.after_turn(turn, trace(f"reply {turn}", prompt=info.estimated_tokens, output=3))
            msgs.append({"role": "assistant", "content": f"reply {turn}"})
            msgs.append({"role": "user", "content": f"and now step {turn} " * 20})
    assert all(a == b for a, b in infos)
    last = infos[-1][1]
    assert last is not None and last.max_cacheable_tokens is not None
    assert last.max_cacheable_tokens >= 32  # what earlier turns sent is cacheable


def test_the_old_spelling_and_a_link_conflict_and_a_non_index_is_refused() -> None:
    with pytest.warns(DeprecationWarning, match="is deprecated"):
        old = ContextBudget(window=1000, prefix_index=PrefixIndex())
    with pytest.raises(ConfigError, match=r"prefix index link .*ContextBudget\(prefix_index="):
        Agent(name="a", model="m", context=[old, PrefixIndex()])
    with pytest.raises(ConfigError, match=r"ContextBudget\.prefix_index must be a prefix index"):
        ContextBudget(window=1000, prefix_index=42)  # type: ignore[arg-type]
    # The old spelling alone is a one-link chain: the budget fingerprints on its own.
    assert ContextChain([old]).links == (old,)
