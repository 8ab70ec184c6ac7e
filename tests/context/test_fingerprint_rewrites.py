"""A rewrite early in a long prompt rehashes what follows without tokenizing it again.

``TruncateToolOutputs(all=False)`` cuts one old output per turn near the window, so every
turn rewrites a message far from the end, and the fingerprint hashes everything after it
again. The tracker keeps the packed ids of the messages a rewrite hashed again unchanged,
so the next rewrite takes them from there: checked by counting what the tokenizer is
handed, and the fingerprints against a fresh index's.
"""

from __future__ import annotations

from typing import Any

from agentflow.context import (
    MessageCounter,
    PrefixIndex,
    TiktokenCounter,
    TruncateToolOutputs,
)
from agentflow.context._budget import ContextBudget

from .budget_util import bind_indexed
from .tool_history import call, output, result


def test_repeated_early_rewrites_tokenize_only_what_changed(encoded: list[str]) -> None:
    mc = MessageCounter(TiktokenCounter())
    index = PrefixIndex(mc)
    s = index.session()
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are careful."}]
    for n in range(40):  # 80 messages: more than the counter keeps rendered (64)
        msgs += [call(n), result(n, output(100, n))]
    s.observe(msgs)
    outputs = {m["content"] for m in msgs if m["role"] == "tool"}
    for turn in range(6):
        # Rewrite output ``turn`` (as a cut would) and append a new round.
        i = 2 + 2 * turn
        msgs[i] = {**msgs[i], "content": f"cut {turn}"}
        new = output(100, 100 + turn)
        msgs += [call(100 + turn), result(100 + turn, new)]
        encoded.clear()
        cacheable = s.observe(msgs)
        again = [t for t in encoded if t in outputs]
        if turn == 0:
            # The first rewrite tokenizes what follows it and is no longer rendered in
            # the counter's cache, once (nothing was kept yet) ...
            assert again and len(again) == len(set(again))
        else:
            # ... later ones take every unchanged output from the packed ids, and the
            # new output is tokenized once: its count's ids are still in the counter's
            # cache when the fingerprint reaches it.
            assert again == []
            assert encoded.count(new) == 1
        outputs.add(new)
        # The same blocks as a fresh index's from scratch; cacheable up to the rewrite.
        fresh = PrefixIndex(MessageCounter(TiktokenCounter())).session()
        fresh.observe(msgs)
        assert s.blocks == fresh.blocks
        # (the block across its start may match too: the template's tokens and the role)
        assert s._msg_blocks[i] * 16 <= cacheable <= (s._msg_blocks[i] + 1) * 16
    # Kept ids go with their message's place: a truncated history drops the rest.
    packed = sum(a is not None for a in s._msg_ids)
    assert len(s._msg_ids) == len(msgs) and packed >= 40
    del msgs[5:]
    s.observe(msgs)
    assert len(s._msg_ids) == 5


def test_an_appending_session_keeps_only_small_messages_packed() -> None:
    """Appending keeps no large message's ids (they are never hashed again unless a
    rewrite comes before them); small ones — calls, replies — are kept from the start, so
    a rewrite before them never renders them again."""
    mc = MessageCounter(TiktokenCounter())
    index = PrefixIndex(mc)
    s = index.session()
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are careful."}]
    for n in range(20):
        msgs += [call(n), result(n, output(50, n))]  # ~500-token outputs
        s.observe(msgs)
    kept = [a is not None for a in s._msg_ids]
    assert kept == [mc.count_message(m) <= 256 for m in msgs]
    assert kept[1] and not kept[2]  # the call kept, the output not
    assert all(list(a) == mc.render(m) for a, m in zip(s._msg_ids, msgs, strict=True) if a)


async def test_truncating_until_it_fits_tokenizes_each_output_once_after_the_first_cut(
    encoded: list[str],
) -> None:
    """``all=False`` near the window: each turn cuts the oldest long output and the
    prompt after it is fingerprinted again; from the second cut on, no earlier output is
    tokenized whole again — only the new one, for its count. The outputs (~10k tokens,
    ~28 of them in the window) are more than the counter keeps rendered."""
    policy = TruncateToolOutputs(max_tokens=64, all=False)
    ctx, _ = bind_indexed(
        ContextBudget(window=300_000, reserve_output=1_000, margin=0, overflow=policy),
        PrefixIndex(),
    )

    async def never(request: Any) -> Any:
        raise AssertionError("no model call expected")

    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Fix the bug."},
    ]
    outputs: list[str] = []
    cuts = 0
    for turn in range(36):
        new = output(1_000, turn)
        outputs.append(new)
        msgs += [call(turn), result(turn, new)]
        encoded.clear()
        await ctx.before_turn(turn, msgs, [], never)
        cut_now = sum(policy.was_cut(m["content"]) for m in msgs if m["role"] == "tool")
        whole = [t for t in encoded if t in outputs]
        if cut_now > cuts and cuts > 0:
            assert whole == [new], turn
        cuts = cut_now
    assert cuts >= 3
