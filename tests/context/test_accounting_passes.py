"""Token accounting does each piece of work once: an appended message is tokenized once
for its count and its fingerprint, and cutting a long tool output tokenizes only heads of
it — checked by counting what the tokenizer is asked to encode, not by timing."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.context import (
    MessageCounter,
    PrefixIndex,
    TiktokenCounter,
    TruncateToolOutputs,
)
from agentflow.context._budget import ContextBudget
from agentflow.context._calibration import Calibrator
from agentflow.context._estimates import SessionEstimates

from .budget_util import bind_indexed
from .tool_history import TOOLS, call, output, result


def history(rounds: int, lines: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for n in range(rounds):
        msgs += [call(n), result(n, output(lines, n))]
    return msgs


async def never(request: Any) -> Any:
    raise AssertionError("no model call expected")


async def test_a_large_append_is_tokenized_once_for_count_and_fingerprint(
    encoded: list[str],
) -> None:
    # The index keeps its own default counter, as PrefixIndex() does: it renders as the
    # budget's does (cl100k, the same overheads), so it reuses the budget's tokens.
    index = PrefixIndex()
    ctx, budget_ctx = bind_indexed(ContextBudget(window=1_000_000), index)
    msgs = history(3, 20)
    first = await ctx.before_turn(0, msgs, TOOLS, never)
    assert first.max_cacheable_tokens == 0
    big = output(2_000, salt=99)  # ~20k tokens
    assert MessageCounter(TiktokenCounter()).counter.count(big) > 19_000
    msgs += [call(3), result(3, big)]
    encoded.clear()
    info = await ctx.before_turn(1, msgs, TOOLS, never)
    # The output was tokenized exactly once — for the count; the fingerprint reused its
    # ids — and nothing else of size was (the call's name and arguments, the roles).
    assert [t for t in encoded if len(t) > 100] == [big]
    assert sum(map(len, encoded)) < len(big) + 100
    # The reused tokens make the same fingerprint as a fresh index's from scratch.
    fresh = PrefixIndex().session()
    fresh.observe(msgs, TOOLS)
    assert budget_ctx._tracker._tracker.blocks == fresh.blocks  # type: ignore[union-attr]
    # Everything sent before, in whole blocks, is cacheable.
    assert info.max_cacheable_tokens == (first.raw_estimate - 3) // 16 * 16  # 3: reply priming


async def test_an_index_that_renders_otherwise_tokenizes_with_its_own_counter(
    encoded: list[str],
) -> None:
    # o200k renders other ids: the index cannot reuse the budget's cl100k tokens, so it
    # tokenizes with its own counter — still each message once per tokenizer.
    o200k = MessageCounter(TiktokenCounter("o200k_base"))
    ctx, budget_ctx = bind_indexed(ContextBudget(window=1_000_000), PrefixIndex(o200k))
    msgs = history(2, 200)
    await ctx.before_turn(0, msgs, TOOLS, never)
    big = output(500, salt=5)
    msgs += [call(2), result(2, big)]
    encoded.clear()
    await ctx.before_turn(1, msgs, TOOLS, never)
    assert encoded.count(big) == 1  # cl100k, for the count
    fresh = PrefixIndex(MessageCounter(TiktokenCounter("o200k_base"))).session()
    fresh.observe(msgs, TOOLS)
    assert budget_ctx._tracker._tracker.blocks == fresh.blocks  # type: ignore[union-attr]


async def test_cutting_long_outputs_tokenizes_only_their_heads(encoded: list[str]) -> None:
    max_tokens = 256
    policy = TruncateToolOutputs(max_tokens=max_tokens)
    ctx, _ = bind_indexed(
        ContextBudget(
            window=100_000,  # turn 0 fits, with the uncalibrated 50% margin; turn 1 not
            reserve_output=1_000,
            margin=0,
            overflow=policy,
        ),
        PrefixIndex(),
    )
    msgs = history(3, 2_000)  # three ~20k-token outputs: ~60k tokens
    await ctx.before_turn(0, msgs, TOOLS, never)
    big = output(2_000, salt=42)
    msgs += [call(3), result(3, big)]  # over the limit now
    longs = {m["content"] for m in msgs if m["role"] == "tool"}
    encoded.clear()
    info = await ctx.before_turn(1, msgs, TOOLS, never)
    cut = [m["content"] for m in msgs if m["role"] == "tool"]
    assert all(policy.was_cut(c) for c in cut) and info.estimated_tokens < 5_000
    # The new output was tokenized whole once, for its count; the cuts tokenized heads of
    # the outputs only (a few short prefixes each), never a whole one again.
    whole = [t for t in encoded if t in longs]
    assert whole == [big]
    others = [t for t in encoded if t not in longs]
    assert max(map(len, others)) <= 4 * (5 * max_tokens + 16)
    # O(max_tokens) per cut, whatever the output's length (4 outputs of ~50k characters).
    assert sum(map(len, others)) < 4 * 12 * (5 * max_tokens + 16)
    # The next turn appends only: the cut outputs are kept byte-identical.
    before = [dict(m) for m in msgs]
    msgs += [{"role": "assistant", "content": "Done."}]
    after = await ctx.before_turn(2, msgs, TOOLS, never)
    assert msgs[: len(before)] == before
    assert after.max_cacheable_tokens >= (info.raw_estimate - 3) // 16 * 16


@pytest.mark.parametrize(
    "text",
    [
        output(300),
        "word " * 3_000,
        "数据库连接池配置错误。" * 400,  # about a token a character
        "🙂🚀" * 800,  # several tokens a character
        "x" * 20_000,  # one long run
        "short text",
    ],
)
@pytest.mark.parametrize("max_tokens", [1, 7, 100, 512])
def test_cut_finds_the_longest_head_within_the_limit(text: str, max_tokens: int) -> None:
    est = SessionEstimates(MessageCounter(TiktokenCounter()), Calibrator(), "m")
    head = est.cut(text, max_tokens)
    assert text.startswith(head)
    assert est.text(head) <= max_tokens
    if head != text:
        assert est.text(text[: len(head) + 1]) > max_tokens
