"""A session's own message counts: an overflow policy, and the recount after it rewrites
the history, read them from the session's :class:`PromptCounter` — never through the
counter's cache that every session of a budget shares, which other sessions' messages
evict. Counted by what tiktoken is handed and by the shared cache's misses, never timed.
"""

from __future__ import annotations

from typing import Any

from agentflow.context import (
    ContextBudget,
    DropOldest,
    Fail,
    MessageCounter,
    TiktokenCounter,
    TruncateToolOutputs,
)
from agentflow.context._overflow import OverflowPolicy

from .budget_util import call, trace

#: The shared cache: other sessions count this many messages between two turns of one.
CACHE = 64


def _output(turn: int) -> str:
    """A distinct tool output (~1,500 tokens)."""
    return "\n".join(f"row {turn}-{i}: the value of x{i} is {i * 7919 % 1000}" for i in range(100))


async def _never(request: Any) -> Any:
    raise AssertionError("no model request expected")


async def _overflowing(
    policy: OverflowPolicy, handed: list[str]
) -> tuple[MessageCounter, list[str], list[str], int, list[dict[str, Any]]]:
    """One session of a budget whose shared cache other sessions churn between its turns,
    run until ``policy`` rewrites its history; the counter, the outputs appended, what
    tiktoken was handed on that turn, the shared cache's misses on it, and the messages."""
    counter = MessageCounter(TiktokenCounter(), cache_size=CACHE)
    budget = ContextBudget(window=24_000, reserve_output=1_000, margin=0, counter=counter,
                           cache_buster=False, overflow=[policy, Fail()])  # fmt: skip
    session = budget.bind(session_id="s", agent="a", emit=lambda e: None, model="m")
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You read files."},
        {"role": "user", "content": "Read them all."},
    ]
    outputs: list[str] = []
    for turn in range(40):
        seen, misses, count = len(handed), counter.misses, len(msgs)
        info = await session.before_turn(turn, msgs, [], _never)
        if len(msgs) != count or any(m.get("content") not in outputs for m in msgs[3::2]):
            return counter, outputs, handed[seen:], counter.misses - misses, msgs
        session.after_turn(turn, trace("ok", prompt=info.estimated_tokens, output=1))
        # Other sessions of the budget count messages of their own: this one's are evicted.
        for i in range(CACHE):
            counter.count_message({"role": "user", "content": f"another session's {turn}-{i}"})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call(f"c{turn}")]})
        outputs.append(_output(turn))
        msgs.append({"role": "tool", "tool_call_id": f"c{turn}", "content": outputs[-1]})
    raise AssertionError("the policy never ran")


async def test_a_sweep_reads_the_sessions_own_counts(handed: list[str]) -> None:
    """Every output is cut; none is tokenized again whole to learn its length (only the
    newest, counted for the first time), and the recount after the sweep tokenizes only
    the cut messages: no message the session counted before misses the shared cache."""
    counter, outputs, during, misses, msgs = await _overflowing(
        TruncateToolOutputs(max_tokens=64), handed
    )
    assert all("tool output cut" in m["content"] for m in msgs[3::2])
    assert [t for t in during if t in outputs[:-1]] == []
    # The newest round (2 messages), the cut outputs, and the empty message a cut
    # subtracts — evicted from the shared cache each turn by the other sessions.
    assert misses <= 2 + len(outputs) + 1
    assert counter.count_prompt(msgs) == MessageCounter(TiktokenCounter()).count_prompt(msgs)


async def test_the_recount_after_a_drop_keeps_the_kept_messages_counts(handed: list[str]) -> None:
    """Dropping the oldest rounds shifts every later message: they are counted again
    from the session's own counts, not tokenized again."""
    _, outputs, during, misses, msgs = await _overflowing(DropOldest(target=0.5), handed)
    kept = [m["content"] for m in msgs[2:] if m["role"] == "tool"]
    assert 1 <= len(kept) < len(outputs)
    assert [t for t in during if t in outputs[:-1]] == []
    assert misses == 2  # the newest round, counted for the first time


def test_a_prompt_counter_serves_only_the_messages_it_holds() -> None:
    counter = MessageCounter(TiktokenCounter())
    prompt = counter.session()
    a, b, c = ({"role": "user", "content": f"message {i}"} for i in range(3))
    prompt.count([a, b, c])
    assert [prompt.count_of(m) for m in (a, b, c)] == [counter.count_message(m) for m in (a, b, c)]
    replaced = {"role": "user", "content": "message 1, replaced"}
    prompt.count([a, replaced])  # b replaced, c dropped
    assert prompt.count_of(b) is None and prompt.count_of(c) is None
    assert prompt.count_of(replaced) == counter.count_message(replaced)
    assert prompt.count_of(dict(a)) is None  # an equal message is another object
    assert counter.session(check="values").count_of(a) is None
