"""Prefix fingerprints: the hash chain, incremental updates, the fleet-wide bounded index."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow.context import (
    DEFAULT_CAPACITY_TOKENS,
    MessageCounter,
    PrefixIndex,
    PrefixSession,
    TiktokenCounter,
)


class CharCounter:
    """One token per character (its code point): easy to reason about."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def _counter() -> MessageCounter:
    # One overhead token per message and no role tokens' surprises: a message "x" with
    # role "u" renders as [MESSAGE, 'u', 'x'].
    return MessageCounter(CharCounter(), per_message=1, reply_priming=0)


def _msg(text: str, role: str = "u") -> dict[str, Any]:
    return {"role": role, "content": text}


def _tokens(
    mc: MessageCounter, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] = ()
) -> list[int]:
    out = list(mc.render_tools(tools))
    for m in messages:
        out += mc.render(m)
    return out


def _reference_blocks(session: PrefixSession, tokens: list[int]) -> list[int]:
    """The chain computed from scratch: block i = hash((block i-1, its tokens as a tuple))."""
    size = session.index.block_size
    h = session._seed
    out = []
    for i in range(0, len(tokens) - len(tokens) % size, size):
        h = hash((h, tuple(tokens[i : i + size])))
        out.append(h)
    return out


def _common(a: list[int], b: list[int], size: int) -> int:
    """Tokens of the longest common prefix of ``a`` and ``b``, in whole blocks."""
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return n // size * size


def test_only_full_blocks_count_and_repeats_are_cacheable() -> None:
    index = PrefixIndex(_counter(), block_size=4)
    s = index.session()
    msgs = [_msg("abcdefg")]  # 9 tokens: 2 full blocks
    assert s.observe(msgs) == 0
    assert len(s.blocks) == 2 and len(index) == 2
    assert s.observe(msgs) == 8  # the same prompt again: both blocks seen
    other = index.session()
    assert other.observe([_msg("abcdefg")]) == 8  # any session's blocks count
    assert other.observe([_msg("abcXXXXX")]) == 4  # differs inside block 2
    assert index.session().observe([_msg("zzzzzz")]) == 0


def test_appending_reuses_the_chain_and_matches_a_recount() -> None:
    mc = _counter()
    index = PrefixIndex(mc, block_size=4)
    s = index.session()
    msgs = [_msg("system prompt", "s"), _msg("hello")]
    s.observe(msgs)
    prev = _tokens(mc, msgs)
    msgs.append(_msg("a reply", "a"))
    msgs.append(_msg("more"))
    # Everything before, in full blocks, was sent last turn.
    assert s.observe(msgs) == len(prev) // 4 * 4
    assert s.blocks == _reference_blocks(s, _tokens(mc, msgs))


def test_rewrites_rehash_from_the_first_changed_message() -> None:
    mc = _counter()
    index = PrefixIndex(mc, block_size=4)
    s = index.session()
    msgs = [_msg("pinned system prompt", "s"), *(_msg(f"turn {i} text") for i in range(6))]
    s.observe(msgs)
    before = _tokens(mc, msgs)
    pinned = len(_tokens(mc, msgs[:1]))
    # Compaction: turns 0-3 become one summary right after the pinned prefix.
    msgs[1:5] = [_msg("summary of four turns")]
    after = _tokens(mc, msgs)
    common = next(i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b)
    assert common >= pinned  # the next message's overhead and role tokens match too
    # The pinned prefix still hits, in whole blocks; nothing after the first difference.
    assert s.observe(msgs) == common // 4 * 4
    assert s.blocks == _reference_blocks(s, _tokens(mc, msgs))
    # The last message replaced (a tool output truncated, say).
    msgs[-1] = {**msgs[-1], "content": "truncated"}
    s.observe(msgs)
    assert s.blocks == _reference_blocks(s, _tokens(mc, msgs))
    # Tools go first: a change of tools changes every block.
    fn: dict[str, Any] = {"name": "f", "parameters": {}}
    tools = [{"type": "function", "function": fn}]
    assert s.observe(msgs, tools) == 0
    assert s.blocks == _reference_blocks(s, _tokens(mc, msgs, tools))
    before = _tokens(mc, msgs, tools)
    fn["name"] = "g"  # nested edit of the schema: same blocks up to the name only
    assert s.observe(msgs, tools) == _common(before, _tokens(mc, msgs, tools), 4) == 40
    assert s.blocks == _reference_blocks(s, _tokens(mc, msgs, tools))


@pytest.mark.parametrize("share", [False, True])
def test_random_histories_match_a_recount_and_the_index_stays_consistent(share: bool) -> None:
    """Appends, rewrites, truncations and tool changes across sessions, against
    from-scratch recounts; the bounded index always holds whole prefixes. With
    ``share``, each tracker follows the session's own PromptCounter, which counts
    (sometimes twice, around an edit; sometimes not at all) before each observe."""
    rng = random.Random(4)
    mc = _counter()
    index = PrefixIndex(mc, block_size=8, capacity_tokens=8 * 300)
    shared = [_msg("shared instructions " * 3, "s")]

    def new_session() -> PrefixSession:
        return index.session(mc.session(check="deep") if share else None)

    sessions = [(new_session(), [dict(m) for m in shared]) for _ in range(4)]
    tools: list[dict[str, Any]] = []
    for step in range(300):
        s, msgs = sessions[rng.randrange(len(sessions))]
        op = rng.random()
        if op < 0.7 or len(msgs) < 3:
            msgs.append(_msg("".join(rng.choice("abcdef ") for _ in range(rng.randrange(1, 40)))))
        elif op < 0.8:
            del msgs[rng.randrange(1, len(msgs)) :]
        elif op < 0.9:
            j = rng.randrange(len(msgs))
            if share:  # its PromptCounter checks deeply: edit in place
                msgs[j]["content"] += "!"
            else:  # the default check sees replaced messages
                msgs[j] = {**msgs[j], "content": msgs[j]["content"] + "!"}
        elif op < 0.95:
            tools = [{"name": f"t{step}"}] if not tools else []
        else:
            s = new_session()  # a new session, sharing the instructions
            msgs = [dict(m) for m in shared]
            sessions.append((s, msgs))
        if share and rng.random() < 0.7:
            s.prompt.count(msgs, tools)
            if rng.random() < 0.3 and len(msgs) > 2:
                msgs[-1] = _msg("replaced after a first count")
                s.prompt.count(msgs, tools)
        blocks_before = _reference_blocks(s, _tokens(mc, msgs, tools))
        linear = 0
        while linear < len(blocks_before) and blocks_before[linear] in index:
            linear += 1
        assert s.observe(msgs, tools) == linear * 8
        assert s.blocks == blocks_before
        assert len(index) <= 300
        _tree(index)  # whole prefixes only, follower counts and leaves exact
    assert index.evicted_blocks > 0


def _tree(index: PrefixIndex) -> tuple[dict[int, int | None], set[int]]:
    """The index's parents and leaves, after checking its follower counts and leaves."""
    parents = dict(index._parents)
    followers: dict[int, int] = {}
    for parent in parents.values():
        assert parent is None or parent in parents
        if parent is not None:
            followers[parent] = followers.get(parent, 0) + 1
    assert {h: n for h, n in followers.items() if n > 1} == index._followers
    leaves = set(parents) - set(followers)
    assert leaves == set(index._leaves)
    return parents, leaves


def test_record_builds_runs_that_split_where_chains_branch() -> None:
    """A fresh chain is one run; a chain that continues a leaf grows its run; a branch
    inside a run splits it; a chain whose hashes repeat (a 64-bit collision) is held as it
    comes — lookups follow chains, not single hashes — and the tree stays whole."""
    index = PrefixIndex(_counter(), block_size=4)
    index.record([10, 11, 12])
    assert _tree(index) == ({10: None, 11: 10, 12: 11}, {12})
    assert len(index._runs()) == 1
    index.record([10, 11, 13, 14], start=2)  # a branch after 11: the run splits
    assert _tree(index) == ({10: None, 11: 10, 12: 11, 13: 11, 14: 13}, {12, 14})
    assert len(index._runs()) == 3
    index.record([10, 11, 13, 14, 15, 16], start=4)  # continues a leaf: its run grows
    assert _tree(index) == ({10: None, 11: 10, 12: 11, 13: 11, 14: 13, 15: 14, 16: 15}, {12, 16})
    assert len(index._runs()) == 3 and index._leaves == [12, 16]
    index.record([10, 11, 12])  # sent again: its leaf is the most recent
    assert index._leaves == [16, 12]
    index.record([20, 21, 20, 22])  # 20 twice
    index.record([30, 12, 31])  # 12 is held already, after 11
    assert index.cached_prefix_blocks([20, 21, 20, 22]) == 4
    assert index.cached_prefix_blocks([20, 22]) == 1
    assert index.cached_prefix_blocks([30, 12, 31, 32]) == 3
    assert index.cached_prefix_blocks([10, 11, 12]) == 3
    assert len(index) == 7 + 4 + 3 and 31 in index and 32 not in index
    index._evict(len(index))  # everything goes, leaves first, without a dangling run
    assert len(index) == 0 and not index._roots and not index._queue and not index._runs()


def test_eviction_gives_up_cold_tails_first() -> None:
    mc = _counter()
    index = PrefixIndex(mc, block_size=4, capacity_tokens=4 * 12)
    shared = _msg("instructions.", "s")
    cold_msgs = [shared, _msg("an old conversation")]
    hot_msgs = [shared, _msg("x" * 22)]
    common = _common(_tokens(mc, cold_msgs), _tokens(mc, hot_msgs), 4) // 4
    cold = index.session()
    cold.observe(cold_msgs)
    hot = index.session()
    hot.observe(hot_msgs)
    n_cold, n_hot = len(cold.blocks), len(hot.blocks)
    assert (n_cold, n_hot, common) == (9, 9, 4)
    over = n_cold + n_hot - common - 12
    assert len(index) == 12 and index.evicted_blocks == over == 2
    # The cold session lost its tail; the hot one, sent last, kept everything.
    assert index.cached_prefix_blocks(cold.blocks) == n_cold - over
    assert index.cached_prefix_blocks(hot.blocks) == n_hot
    # Cold again: its lost tail is sent (and recorded) again; now hot's tail goes.
    assert cold.observe(cold_msgs) == (n_cold - over) * 4
    assert index.cached_prefix_blocks(cold.blocks) == n_cold
    assert index.cached_prefix_blocks(hot.blocks) == n_hot - over
    # Shared blocks are never evicted while another conversation continues them.
    assert index.cached_prefix_blocks(hot.blocks) >= common


def test_fingerprints_are_the_same_in_every_process() -> None:
    """Python's hash of int tuples does not depend on PYTHONHASHSEED."""
    script = (
        "from agentflow.context import PrefixIndex, MessageCounter, TiktokenCounter\n"
        "s = PrefixIndex(MessageCounter(TiktokenCounter())).session()\n"
        "s.observe([{'role': 'user', 'content': 'the same prompt ' * 40}])\n"
        "print(s.blocks)\n"
    )
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1] and len(outs[0]) >= 5


def test_default_index_counts_real_tokens() -> None:
    index = PrefixIndex()
    assert index.block_size == 16 and index.capacity_tokens == DEFAULT_CAPACITY_TOKENS
    s = index.session()
    msgs = [{"role": "user", "content": "word " * 100}]
    s.observe(msgs)
    n = MessageCounter(TiktokenCounter()).count_prompt(msgs) - 3  # no reply priming
    assert len(s.blocks) == n // 16
    assert index.session().observe(msgs) == n // 16 * 16
    assert s.prompt.tokens == n + 3
    assert index.held_tokens == len(index) * 16


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="block_size"):
        PrefixIndex(block_size=0)
    with pytest.raises(ConfigError, match="capacity_tokens"):
        PrefixIndex(block_size=16, capacity_tokens=8)
