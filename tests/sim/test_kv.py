"""The KV block manager: hash-chain prefix hits, reference counts, LRU eviction."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.sim import BlockManager, Engine, extend_block_hashes

from .util import request, run, tiny, tokens

BS = 16


def chain(toks: list[int]) -> list[int]:
    hashes: list[int] = []
    extend_block_hashes(hashes, toks, BS, len(toks) // BS)
    return hashes


def cache_sequence(kv: BlockManager, toks: list[int]) -> list[int]:
    """Allocate, fill and cache a sequence's blocks; returns its (held) block list."""
    blocks: list[int] = []
    assert kv.allocate(blocks, -(-len(toks) // BS))
    for i, h in enumerate(chain(toks)):
        kv.register(blocks, i, h)
    return blocks


def predicted_hit_blocks(cached: list[int], query: list[int], limit_tokens: int) -> int:
    """The block-hash rule: leading full blocks identical to the cached sequence's."""
    n = 0
    while (
        (n + 1) * BS <= min(len(cached), limit_tokens)
        and (n + 1) * BS <= len(query)
        and cached[n * BS : (n + 1) * BS] == query[n * BS : (n + 1) * BS]
    ):
        n += 1
    return n


def test_a_block_hits_only_if_every_earlier_block_is_identical() -> None:
    base = tokens(1, 64)
    kv = BlockManager(100, BS)
    kv.free(cache_sequence(kv, base))
    same_tail_new_head = [base[0] + 1, *base[1:]]
    assert kv.match(chain(base), 10) == 4
    assert kv.match(chain(same_tail_new_head), 10) == 0  # blocks 1-3 identical, chain broken
    changed_third = [*base[:40], 7, *base[41:]]
    assert kv.match(chain(changed_third), 10) == 2
    assert kv.match(chain(base), 3) == 3  # capped


@settings(max_examples=150)
@given(
    shared=st.integers(0, 120),
    len_a=st.integers(1, 80),
    len_b=st.integers(1, 80),
    salt=st.integers(0, 1000),
)
def test_hits_equal_the_block_hash_rule(shared: int, len_a: int, len_b: int, salt: int) -> None:
    prefix = tokens(salt, shared)
    a = prefix + tokens(salt + 1, len_a)
    b = prefix + tokens(salt + 2, len_b)
    kv = BlockManager(64, BS)
    kv.free(cache_sequence(kv, a))
    assert kv.match(chain(b), len(b) // BS) == predicted_hit_blocks(a, b, len(a))


@settings(max_examples=60, deadline=None)
@given(
    shared=st.integers(0, 300),
    len_a=st.integers(1, 200),
    len_b=st.integers(1, 200),
    out_a=st.integers(1, 40),
    salt=st.integers(0, 1000),
)
def test_engine_cached_tokens_follow_the_rule(
    shared: int, len_a: int, len_b: int, out_a: int, salt: int
) -> None:
    """Through the engine: A's prompt and its output (all but the unfed last token) are cached."""
    prefix = tokens(salt, shared)
    prompt_a = prefix + tokens(salt + 1, len_a)
    prompt_b = prefix + tokens(salt + 2, len_b)
    engine = Engine(tiny())
    ra = engine.add(request(prompt_a, out_a))
    run(engine)
    computed_a = prompt_a + tokens(10_000, out_a)[: out_a - 1]
    rb = engine.add(request(prompt_b, 5))
    run(engine)
    # At most tokens − 1 can be cached: the last prompt token is always computed.
    expected = predicted_hit_blocks(computed_a, prompt_b, len(computed_a))
    expected = min(expected, (len(prompt_b) - 1) // BS)
    assert engine.record(rb).cached_tokens == expected * BS
    assert engine.record(ra).cached_tokens == 0
    stats = engine.stats()
    assert stats.prefix_cache_queries == len(prompt_a) + len(prompt_b)
    assert stats.prefix_cache_hits == expected * BS


def test_reference_counts_keep_shared_blocks_cached_while_held() -> None:
    kv = BlockManager(8, BS)
    toks = tokens(3, 32)
    held = cache_sequence(kv, toks)
    h = chain(toks)
    other: list[int] = []
    kv.acquire(other, h, 2)
    assert kv.ref_count(h[0]) == 2 and kv.used_blocks == 2
    kv.free(held)
    assert kv.ref_count(h[0]) == 1 and kv.used_blocks == 2
    kv.free(other)
    assert kv.ref_count(h[0]) == 0 and kv.used_blocks == 0 and kv.num_cached_blocks == 2
    assert kv.free_blocks == 8 and kv.usage == 0.0


def test_lru_eviction_takes_the_least_recently_freed_block_first() -> None:
    kv = BlockManager(6, BS)
    a, b, c = tokens(1, 32), tokens(2, 32), tokens(3, 32)
    ha, hb, hc = chain(a), chain(b), chain(c)
    blocks_a = cache_sequence(kv, a)
    blocks_b = cache_sequence(kv, b)
    blocks_c = cache_sequence(kv, c)
    assert kv.free_blocks == 0
    kv.free(blocks_a)
    kv.free(blocks_b)
    kv.free(blocks_c)
    # Each sequence frees last block first, so its prefix is evicted last.
    assert kv.free_order() == [ha[1], ha[0], hb[1], hb[0], hc[1], hc[0]]
    # A hit takes a block out of the queue: touching b protects it.
    held_b: list[int] = []
    kv.acquire(held_b, hb, 2)
    assert kv.free_order() == [ha[1], ha[0], hc[1], hc[0]]
    new: list[int] = []
    assert kv.allocate(new, 3)
    assert kv.evictions == 3
    assert kv.free_order() == [hc[0]]
    assert kv.match(ha, 2) == 0  # a's chain is gone
    assert kv.match(hb, 2) == 2  # b was held
    assert kv.match(hc, 2) == 1  # c's first block survives, its second was evicted
    assert not kv.allocate(new, 2)  # only one block free
    assert kv.free_blocks == 1


def test_never_used_blocks_go_before_any_cached_block() -> None:
    kv = BlockManager(4, BS)
    kv.free(cache_sequence(kv, tokens(1, 32)))
    assert kv.allocate([], 2)
    assert kv.evictions == 0 and kv.num_cached_blocks == 2
    assert kv.allocate([], 1)
    assert kv.evictions == 1


def test_a_duplicate_block_stays_private() -> None:
    kv = BlockManager(8, BS)
    toks = tokens(5, 16)
    first = cache_sequence(kv, toks)
    second = cache_sequence(kv, toks)  # computed concurrently: same key, separate block
    assert second == [-1] and kv.used_blocks == 2 and kv.num_cached_blocks == 1
    kv.free(second)
    kv.free(first)
    assert kv.free_blocks == 8 and kv.num_cached_blocks == 1


def test_caching_off_never_hits() -> None:
    kv = BlockManager(8, BS, enable_caching=False)
    toks = tokens(5, 48)
    kv.free(cache_sequence(kv, toks))
    assert kv.match(chain(toks), 3) == 0 and kv.num_cached_blocks == 0
