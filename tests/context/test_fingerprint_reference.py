"""The fleet-wide PrefixIndex against a straightforward reference, on random sessions.

The reference records and evicts one block at a time, as the index's definition says:
a leaf is the least recently sent block nothing follows; evicting it may make its
parent a leaf, which goes to the front of the queue. Every answer the index gives
(cacheable tokens per turn), what it holds, its leaves in eviction order and how many
blocks it gave up must be the same — whatever shortcuts the index takes (chains
recorded in bulk, a cold chain evicted in one walk up it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.context import MessageCounter, PrefixIndex, PrefixSession

from .test_fingerprint import CharCounter


class ReferenceIndex:
    """Held blocks, one at a time: parent per block, children per block, LRU leaves."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = capacity_blocks
        self.parents: dict[int, int | None] = {}
        self.children: dict[int, int] = {}
        self.leaves: OrderedDict[int, None] = OrderedDict()
        self.evicted = 0

    def cached(self, blocks: Sequence[int]) -> int:
        n = 0
        while n < len(blocks) and blocks[n] in self.parents:
            n += 1
        return n

    def record(self, blocks: Sequence[int], start: int) -> None:
        parent = blocks[start - 1] if start > 0 else None
        for h in blocks[start:]:
            if h not in self.parents:
                self.parents[h] = parent
                if parent is not None:
                    self.children[parent] = self.children.get(parent, 0) + 1
                    self.leaves.pop(parent, None)
                self.leaves[h] = None
            parent = h
        if parent is not None and parent in self.leaves:
            self.leaves.move_to_end(parent)
        while len(self.parents) > self.capacity:
            h, _ = self.leaves.popitem(last=False)
            p = self.parents.pop(h)
            self.evicted += 1
            if p is not None:
                self.children[p] -= 1
                if not self.children[p]:
                    del self.children[p]
                    self.leaves[p] = None
                    self.leaves.move_to_end(p, last=False)


def _tokens(mc: MessageCounter, messages: Sequence[Mapping[str, Any]]) -> list[int]:
    out: list[int] = []
    for m in messages:
        out += mc.render(m)
    return out


def _chain(seed: int, tokens: list[int], size: int) -> list[int]:
    h, out = seed, []
    for i in range(0, len(tokens) - len(tokens) % size, size):
        h = hash((h, tuple(tokens[i : i + size])))
        out.append(h)
    return out


# An operation: (session, kind, value). Kinds: 0 append a message, 1 drop messages from
# an index on, 2 rewrite a message (as a truncation or compaction does), 3 the session
# starts over (a new session with the shared instructions).
_OPS = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(0, 9),
        st.text(alphabet="abc ", min_size=0, max_size=30),
        st.integers(0, 20),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=120, deadline=None)
@given(
    ops=_OPS,
    block_size=st.sampled_from([1, 2, 4, 8]),
    capacity=st.integers(1, 40),
    replies=st.booleans(),
)
def test_index_matches_the_reference(
    ops: list[tuple[int, int, str, int]], block_size: int, capacity: int, replies: bool
) -> None:
    mc = MessageCounter(CharCounter(), per_message=1, reply_priming=0)
    index = PrefixIndex(mc, block_size=block_size, capacity_tokens=capacity * block_size)
    ref = ReferenceIndex(capacity)
    shared = {"role": "s", "content": "the shared instructions"}
    sessions: list[tuple[PrefixSession, list[dict[str, Any]]]] = []

    def observe(s: PrefixSession, msgs: list[dict[str, Any]]) -> None:
        blocks = _chain(s._seed, _tokens(mc, msgs), block_size)
        cached = ref.cached(blocks)
        ref.record(blocks, cached)
        assert s.observe(msgs) == cached * block_size
        assert s.blocks == blocks
        assert len(index) == len(ref.parents) and index.evicted_blocks == ref.evicted
        assert index._parents == ref.parents
        assert list(index._leaves) == list(ref.leaves)
        assert index._followers == {h: n for h, n in ref.children.items() if n > 1}

    for who, kind, text, at in ops:
        if kind == 3 or not sessions:
            sessions.append((index.session(), [dict(shared)]))
            who = len(sessions) - 1
        s, msgs = sessions[who % len(sessions)]
        if kind == 0 or len(msgs) < 2:
            msgs.append({"role": "u", "content": text})
        elif kind == 1:
            del msgs[1 + at % (len(msgs) - 1) :]
        elif kind == 2:
            j = 1 + at % (len(msgs) - 1)
            msgs[j] = {**msgs[j], "content": text}
        observe(s, msgs)
        if replies and text:
            # A reply recorded after the prompt, then sent back as the next message.
            msgs.append({"role": "a", "content": text[::-1]})
            observe(s, msgs)


def test_a_cold_chain_is_evicted_in_one_walk_with_the_reference_order() -> None:
    """Two conversations share a prefix; the colder one's whole tail goes, block by
    block from its end, before the hot one loses anything — and the shared block that
    is left a leaf goes to the front of the queue, as the reference puts it."""
    mc = MessageCounter(CharCounter(), per_message=1, reply_priming=0)
    index = PrefixIndex(mc, block_size=1, capacity_tokens=12)
    ref = ReferenceIndex(12)
    chains = [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 14, 15, 16, 17], [21, 22]]
    for chain in chains:
        cached = ref.cached(chain)
        assert index.cached_prefix_blocks(chain) == cached
        ref.record(chain, cached)
        index.record(chain, cached)
    # 7 + 4 + 2 = 13 blocks, 12 held: the cold chain's tail block (7) went first.
    assert index.evicted_blocks == ref.evicted == 1
    assert 7 not in index and 6 in index
    index.record([31, 32, 33, 34, 35, 36], 0)
    ref.record([31, 32, 33, 34, 35, 36], 0)
    # Six more: 6, 5 and 4 (the rest of the cold tail), then 17, 16, 15 from the next
    # coldest; 3 is followed by 14 still, so the shared prefix stays.
    assert index._parents == ref.parents and list(index._leaves) == list(ref.leaves)
    assert index.evicted_blocks == ref.evicted == 7
    assert [h for h in (1, 2, 3, 14) if h in index] == [1, 2, 3, 14]
    assert next(iter(index._leaves)) == 14  # left a leaf by the eviction: at the front


def test_long_chains_diverging_anywhere_match_the_reference() -> None:
    """Chains of a few hundred blocks that share a prefix of any length: the walk finds
    where they part however far in (halving long runs by slices)."""
    mc = MessageCounter(CharCounter(), per_message=1, reply_priming=0)
    index = PrefixIndex(mc, block_size=1, capacity_tokens=100_000)
    ref = ReferenceIndex(100_000)
    base = list(range(1, 600))
    index.record(base)
    ref.record(base, 0)
    for cut in (0, 1, 31, 32, 33, 64, 250, 598, 599):
        chain = [*base[:cut], *(10_000 * (cut + 1) + j for j in range(50))]
        assert index.cached_prefix_blocks(chain) == ref.cached(chain) == cut
        index.record(chain)
        ref.record(chain, cut)
        assert index._parents == ref.parents and index._leaves == list(ref.leaves)
