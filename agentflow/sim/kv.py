"""The KV-cache block manager: fixed capacity, a block-level prefix cache, LRU eviction.

It follows vLLM v1's ``BlockPool``/``KVCacheManager`` closely enough that a schedule
which keeps hits there keeps them here:

- The cache holds ``num_blocks`` blocks of ``block_size`` tokens. A sequence holds
  ``ceil(tokens computed or being computed / block_size)`` blocks.
- Only FULL blocks are cached, under a hash chain: block *i*'s key is
  ``hash((key of block i−1, *token ids of block i))``, so a block hits only if every
  earlier block of the sequence is identical too. A lookup walks the chain from the
  start and stops at the first miss.
- Blocks are reference-counted; a block nobody holds stays cached (and counts as free)
  until it is reused.
- Free blocks form one queue: blocks never used come first, then freed blocks in the
  order they were freed (a sequence frees its blocks last-first, so its prefix goes
  to the back and is evicted last). Allocation takes from the front; taking a cached
  block evicts it. A hit on a free cached block takes it out of the queue. This is
  LRU eviction of unreferenced blocks, as in vLLM.
- A block filled by a sequence whose key is already cached (two sequences computed the
  same block at once) stays private to that sequence, as vLLM keeps a duplicate.

Nothing here is per-token or proportional to capacity: memory is one dict entry per
cached block (and one in the free queue while nobody holds it) and one list entry per
held block, so a rack's ~70M-token cache costs nothing until it is used. Used, it costs
about 340 B per cached block (~21 B per token: ~1.4 GB for a full 4.2M-block cache;
``docs/simulator.md``), and cached blocks go only when the cache is full. Keys use
Python's ``hash`` of a tuple of ints, which is not salted (only ``str``/``bytes``
hashing is), so they are the same in every process.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from agentflow._counts import check_count

__all__ = ["ANON", "BlockManager", "extend_block_hashes"]

#: A held block that carries no prefix-cache key (partial, or a duplicate of a cached one).
ANON = -1
_MASK = (1 << 63) - 1
#: The parent key of a sequence's first block.
_ROOT = 0x5EED_0F_B10C


def extend_block_hashes(
    hashes: list[int], tokens: Sequence[int], block_size: int, num_blocks: int
) -> None:
    """Extend ``hashes`` (the chain keys of ``tokens``' first blocks) to ``num_blocks`` keys.

    Args:
        hashes: keys computed so far, extended in place.
        tokens: the sequence's token ids; must hold at least ``num_blocks`` full blocks.
        block_size: tokens per block.
        num_blocks: how many leading full blocks should have keys.
    """
    start = len(hashes)
    if start >= num_blocks:
        return
    prev = hashes[-1] if hashes else _ROOT
    for i in range(start, num_blocks):
        prev = hash((prev, *tokens[i * block_size : (i + 1) * block_size])) & _MASK
        hashes.append(prev)


class BlockManager:
    """Fixed-capacity KV blocks with a prefix cache, reference counts and LRU eviction.

    A sequence's blocks are a plain ``list[int]`` the caller owns: entry *i* is block
    *i*'s cache key, or :data:`ANON`. The manager changes those lists only through its
    methods.

    Args:
        num_blocks: capacity in blocks.
        block_size: tokens per block.
        enable_caching: keep full blocks for reuse (vLLM's ``--enable-prefix-caching``,
            on by default in v1); off, no block ever hits.

    Attributes:
        queries: prompt tokens looked up (vLLM's ``prefix_cache_queries``), counted at
            admission of requests that were never preempted.
        hits: of those, tokens found cached (vLLM's ``prefix_cache_hits``).
        preempted_queries: as ``queries``, for re-admissions after a preemption.
        preempted_hits: as ``hits``, for re-admissions after a preemption.
        evictions: cached blocks evicted to make room.
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_caching: bool = True) -> None:
        check_count(num_blocks, "num_blocks")
        check_count(block_size, "block_size")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self._never_used = num_blocks
        # The free queue past the never-used blocks: cached keys (≥ 0) and anonymous
        # freed blocks (negative ids), oldest first.
        self._free: OrderedDict[int, None] = OrderedDict()
        # Reference count of every cached block, held or free.
        self._refs: dict[int, int] = {}
        self._next_anon = -2
        self.queries = 0
        self.hits = 0
        self.preempted_queries = 0
        self.preempted_hits = 0
        self.evictions = 0

    # --- State -----------------------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        """Blocks that can be allocated now (never used, freed, or cached but unreferenced)."""
        return self._never_used + len(self._free)

    @property
    def used_blocks(self) -> int:
        """Blocks some sequence holds."""
        return self.num_blocks - self.free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks held by sequences (vLLM's ``kv_cache_usage_perc``, 0–1)."""
        return self.used_blocks / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks carrying a prefix-cache key, held or free."""
        return len(self._refs)

    def ref_count(self, key: int) -> int | None:
        """The reference count of the cached block ``key``, or ``None`` if it is not cached."""
        return self._refs.get(key)

    def any_cached(self, keys: Sequence[int]) -> bool:
        """Whether any of ``keys`` is a cached block (held or free)."""
        return not self._refs.keys().isdisjoint(keys)

    def free_order(self) -> list[int]:
        """The cached keys in the free queue, next to be evicted first (for tests and tools)."""
        return [k for k in self._free if k >= 0]

    # --- Lookup ----------------------------------------------------------------------

    def match(self, hashes: Sequence[int], max_blocks: int) -> int:
        """How many leading blocks of a chain are cached (at most ``max_blocks``).

        Pure: changes nothing and counts nothing.
        """
        if not self.enable_caching:
            return 0
        refs = self._refs
        n = 0
        limit = min(max_blocks, len(hashes))
        while n < limit and hashes[n] in refs:
            n += 1
        return n

    def evictable_among(self, hashes: Sequence[int], n: int) -> int:
        """How many of the first ``n`` keys are cached blocks nobody holds.

        Taking those out of the free queue (on a hit) lowers :attr:`free_blocks`, so an
        admission needs ``new blocks + evictable_among(...)`` free blocks.
        """
        refs = self._refs
        return sum(1 for h in hashes[:n] if refs.get(h) == 0)

    def record_query(self, num_tokens: int, hit_tokens: int, *, preempted: bool = False) -> None:
        """Count one admission's lookup in the vLLM-style counters."""
        if preempted:
            self.preempted_queries += num_tokens
            self.preempted_hits += hit_tokens
        else:
            self.queries += num_tokens
            self.hits += hit_tokens

    # --- Allocation ------------------------------------------------------------------

    def acquire(self, blocks: list[int], hashes: Sequence[int], n: int) -> None:
        """Append the first ``n`` cached blocks of a chain to ``blocks`` (hits), taking a reference.

        The caller has checked with :meth:`match` that they are cached.
        """
        refs = self._refs
        free = self._free
        for h in hashes[:n]:
            ref = refs[h]
            if ref == 0:
                del free[h]
            refs[h] = ref + 1
            blocks.append(h)

    def allocate(self, blocks: list[int], n: int) -> bool:
        """Append ``n`` new blocks to ``blocks``, evicting least recently freed cached blocks.

        Returns:
            ``False`` (and changes nothing) if fewer than ``n`` blocks are free.
        """
        if n <= 0:
            return True
        if n > self._never_used + len(self._free):
            return False
        fresh = min(n, self._never_used)
        self._never_used -= fresh
        free = self._free
        refs = self._refs
        for _ in range(n - fresh):
            key, _none = free.popitem(last=False)
            if key >= 0:
                del refs[key]
                self.evictions += 1
        blocks.extend([ANON] * n)
        return True

    def register(self, blocks: list[int], index: int, key: int) -> None:
        """Block ``index`` of a sequence is now full and computed: cache it under ``key``."""
        if not self.enable_caching or blocks[index] != ANON or key in self._refs:
            return
        self._refs[key] = 1
        blocks[index] = key

    def register_range(
        self, blocks: list[int], hashes: Sequence[int], start: int, end: int
    ) -> None:
        """:meth:`register` blocks ``start`` to ``end − 1`` under ``hashes[start:end]``."""
        if not self.enable_caching:
            return
        refs = self._refs
        for b in range(start, end):
            key = hashes[b]
            if blocks[b] == ANON and key not in refs:
                refs[key] = 1
                blocks[b] = key

    def free(self, blocks: list[int]) -> None:
        """Release every block of a sequence (last block first) and empty ``blocks``."""
        refs = self._refs
        free = self._free
        for key in reversed(blocks):
            if key >= 0:
                ref = refs[key] - 1
                refs[key] = ref
                if ref == 0:
                    free[key] = None
            else:
                free[self._next_anon] = None
                self._next_anon -= 1
        blocks.clear()
