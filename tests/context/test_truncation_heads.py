"""A cut starts from the output's first ids, kept from its count, instead of tokenizing a
head of it — and cuts exactly where tokenizing the head would have.

Each session keeps the first 1,024 ids of its long tool outputs (over 2,048 tokens) as its
count made them, by the text's hash (the text itself is not kept alive); a cut takes them,
checks that they decode to the text's beginning, and finds the cut from them. Counted by
what tiktoken is handed, and compared with sessions that keep nothing.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentflow.context import TiktokenCounter, TruncateToolOutputs
from agentflow.context._budget import ContextBudget
from agentflow.context._estimates import _HEAD_IDS

from .budget_util import trace


async def _never(request: Any) -> Any:
    raise AssertionError("no model call expected")


async def run(words: int, *, keep: bool, handed: list[str]) -> tuple[list[Any], list[list[str]]]:
    """Turns of one session (a tool call and a ``words``-word output each) through its
    first sweep; the messages, and per output cut the heads of it tiktoken was handed."""
    rng = random.Random(7)
    vocab = ["".join(rng.choice("abcdefghij") for _ in range(k)) for k in (2, 3, 5, 8) * 30]
    policy = TruncateToolOutputs(max_tokens=300)
    events: list[Any] = []
    ctx = ContextBudget(window=40_000, reserve_output=1_000, overflow=policy).bind(
        session_id="s", agent="a", emit=events.append
    )
    if not keep:
        ctx._est._heads = None
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You read files."}]
    for turn in range(200):
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = " ".join(rng.choice(vocab) for _ in range(words))
        text += "\n" + "".join(rng.choice("abc{}();") for _ in range(200))  # not prose only
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": text})
        outputs = [m["content"] for m in messages if m["role"] == "tool"]
        handed.clear()
        info = await ctx.before_turn(turn, messages, [], _never)
        if events:
            heads = [
                [t for t in handed if o.startswith(t) and 64 < len(t) < len(o)] for o in outputs
            ]
            return messages, heads
        ctx.after_turn(turn, trace(prompt=info.raw_estimate, output=5))
    raise AssertionError("no sweep")


async def test_kept_ids_cut_where_a_tokenized_head_cuts(handed: list[str]) -> None:
    long_words = 2 * _HEAD_IDS  # ~2 tokens a word here: outputs well over 2,048 tokens
    assert TiktokenCounter().count(" ".join(["abcde"] * long_words)) > 2 * _HEAD_IDS
    kept, kept_heads = await run(long_words, keep=True, handed=handed)
    fresh, fresh_heads = await run(long_words, keep=False, handed=handed)
    # Every output cut at the same character, with the same count in its marker.
    assert kept == fresh
    cut = [m for m in kept if m["role"] == "tool" and "tokens of tool output cut" in m["content"]]
    assert len(cut) >= 5
    # Without the kept ids, each cut tokenized one head of its output (the newest one's
    # count tokenized it whole, not a head); with them, none.
    assert all(len(h) == 1 for h in fresh_heads[:-1])
    assert all(h == [] for h in kept_heads)


async def test_shorter_outputs_keep_nothing_and_tokenize_one_head(handed: list[str]) -> None:
    messages, heads = await run(600, keep=True, handed=handed)  # ~1,300 tokens each
    assert all(len(h) == 1 for h in heads[:-1]) and len(heads) >= 5
    assert messages[-1]["content"].endswith("tokens of tool output cut …]")


@pytest.mark.parametrize(
    "text",
    [
        "word " * 3_000,
        "\n".join(f"line {i}: value={i * 7919 % 10007} ok" for i in range(600)),
        "数据库连接池配置错误。" * 400,
        "🙂🚀 ok " * 800,
    ],
)
def test_head_split_from_ids_is_head_split(text: str) -> None:
    tc = TiktokenCounter()
    ids = tc.encode(text)[:_HEAD_IDS]
    for max_tokens in (1, 64, 300, 700):
        expected = TiktokenCounter().head_split(text, max_tokens)
        assert tc.head_split_ids(text, ids, max_tokens) == expected
    assert tc.head_split_ids(text, ids, len(ids)) is None  # not enough ids to tell
    other = tc.encode("something else entirely " * 200)
    assert tc.head_split_ids(text, other, 64) is None  # not this text's ids
