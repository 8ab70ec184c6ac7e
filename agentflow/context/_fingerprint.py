"""Prefix fingerprints: how many of a prompt's tokens any prefix cache could have served.

Servers with prefix caching (vLLM, SGLang, llama.cpp) keep the KV of token *blocks*
(16 tokens in vLLM) under a hash chain: block ``i``'s hash covers block ``i - 1``'s hash
and block ``i``'s tokens, so equal hashes mean equal prefixes; only full blocks count.
:class:`PrefixIndex` does the same over the locally rendered prompt (tool schemas, then
each message as :meth:`MessageCounter.render` tokenizes it) and remembers, fleet-wide,
every block already sent. For each turn, a session's tracker reports the *theoretical
maximum of cacheable prompt tokens* — the leading blocks seen before, by any session,
× block size — which reports set against the ``cached_tokens`` the server reported.

**Incremental.** A session's tracker keeps its prompt's block chain and, per message,
the chain position where the message starts (blocks before it, plus the tokens of the
unfinished block). An appended message hashes only its own tokens; a rewrite
(compaction, truncation) rehashes from the first changed message, found as
:class:`PromptCounter` finds it. Following the session's own :class:`PromptCounter`, a
tracker takes the token ids its count just made, so each message is tokenized once for
both (see :class:`PrefixSession`). The hash is Python's own ``hash`` of the tuple
``(previous hash, *token ids)`` — 64 bits, deterministic for integers across processes,
and the fastest of the candidates measured (``hashlib.blake2b`` and ``sha256`` over packed
ids cost 2.2–2.5× as much per block; ``benchmarks/token_accounting.py``) — the same
construction as vLLM's ``builtin`` block-hash option.

**Bounded.** The index holds at most ``capacity_tokens`` of distinct blocks (default
4,000,000 — room for a few 1M-token sessions; set it to your server's KV capacity, see
the planner) as a tree: each block knows its parent block and how many distinct blocks
follow it (kept as plain ints — a parent per block, a count only where the tree branches —
so the garbage collector has nothing to walk there: ~42 bytes a block). Only *leaves* —
blocks nothing follows — can be evicted, least recently sent first, and a leaf's parent
that becomes a leaf goes to the front of the queue:
a cold conversation is given up from its tail, as vLLM frees a finished sequence's
blocks tail first, while a prefix that any other conversation continues stays. So the
blocks held always form whole prefixes, and "the leading blocks seen before" is found
by binary search: O(log n) lookups per turn, plus O(new blocks) to record them.
Sessions that end leave their blocks to age out, as the server's cache does.

Counts are in the local tokenizer's tokens; with another tokenizer on the server the
ratio of the two is what :class:`~agentflow.context.Calibrator` learns.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from contextlib import suppress
from itertools import islice
from typing import Any

from agentflow._errors import ConfigError
from agentflow.context._counting import TiktokenCounter
from agentflow.context._messages import MessageCounter, _freeze
from agentflow.context._prompt import PromptCounter

__all__ = ["DEFAULT_CAPACITY_TOKENS", "PrefixIndex", "PrefixSession"]

#: The default bound of a :class:`PrefixIndex`, in tokens.
DEFAULT_CAPACITY_TOKENS = 4_000_000


class PrefixIndex:
    """Block hashes of every prompt sent, fleet-wide and bounded; share one per server.

    Not thread-safe: use it from one event loop.

    Args:
        counter: renders prompts into tokens (default: ``cl100k_base`` with OpenAI's
            template overheads).
        block_size: tokens per block (vLLM's default is 16).
        capacity_tokens: the most tokens of distinct blocks held (whole blocks).

    Raises:
        ConfigError: a block size below 1, or a capacity below one block.
    """

    def __init__(
        self,
        counter: MessageCounter | None = None,
        *,
        block_size: int = 16,
        capacity_tokens: int = DEFAULT_CAPACITY_TOKENS,
    ) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"PrefixIndex.block_size must be an int >= 1, got {block_size!r}")
        if (
            isinstance(capacity_tokens, bool)
            or not isinstance(capacity_tokens, int)
            or capacity_tokens < block_size
        ):
            raise ConfigError(
                f"PrefixIndex.capacity_tokens must be an int >= block_size ({block_size}), "
                f"got {capacity_tokens!r}"
            )
        self.counter = counter if counter is not None else MessageCounter(TiktokenCounter())
        self.block_size = block_size
        self.capacity_tokens = capacity_tokens
        self._capacity_blocks = capacity_tokens // block_size
        #: block hash → its parent's, or None: every block held (plain ints, so the
        #: collector has nothing to walk however many blocks there are)
        self._parents: dict[int, int | None] = {}
        #: block hash → how many distinct blocks follow it, for blocks that two or more
        #: follow (a branch); a block held and not a leaf has one otherwise
        self._followers: dict[int, int] = {}
        #: blocks nothing follows, least recently sent first
        self._leaves: OrderedDict[int, None] = OrderedDict()
        #: Blocks given up to stay within capacity, since creation.
        self.evicted_blocks = 0

    @property
    def held_tokens(self) -> int:
        """Tokens of the distinct blocks held now."""
        return len(self._parents) * self.block_size

    def __len__(self) -> int:
        """Distinct blocks held."""
        return len(self._parents)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._parents

    def session(self, prompt: PromptCounter | None = None) -> PrefixSession:
        """A tracker for one session's prompts; drop it when the session ends.

        Args:
            prompt: the session's own :class:`PromptCounter`, to share its check of what
                changed (see :class:`PrefixSession`); by default the tracker keeps one.
        """
        return PrefixSession(self, prompt)

    def cached_prefix_blocks(self, blocks: Sequence[int]) -> int:
        """How many leading ``blocks`` are held (binary search: held blocks form prefixes)."""
        nodes = self._parents
        lo, hi = 0, len(blocks)
        while lo < hi:
            mid = (lo + hi) // 2
            if blocks[mid] in nodes:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def record(self, blocks: Sequence[int], start: int = 0) -> None:
        """Record a prompt's block chain as sent; ``blocks[:start]`` must be held already
        (:meth:`cached_prefix_blocks` says how many are). Evicts over capacity."""
        parents, leaves = self._parents, self._leaves
        parent = blocks[start - 1] if start > 0 else None
        new = list(blocks[start:])
        bulk = len(new) > 1 and parents.keys().isdisjoint(new)
        if bulk:
            # The usual case, a chain none of whose blocks is held (held blocks form
            # prefixes; only a 64-bit collision breaks it): built in bulk, each block
            # followed by the next, the last one a leaf.
            held = len(parents)
            parents.update(zip(new, (parent, *new[:-1]), strict=True))
            if len(parents) != held + len(new):  # a block twice in the chain: undo
                for h in new:
                    parents.pop(h, None)
                bulk = False
            else:
                self._follow(parent)
                parent = new[-1]
                leaves[parent] = None
        if not bulk:
            for h in new:
                if h not in parents:
                    parents[h] = parent
                    self._follow(parent)
                    leaves[h] = None
                parent = h
        if parent is not None and parent in leaves:
            leaves.move_to_end(parent)
        over = len(parents) - self._capacity_blocks
        if over > 0:
            self._evict(over)

    def _follow(self, parent: int | None) -> None:
        """``parent`` gains a follower (and is no leaf any more)."""
        if parent is None:
            return
        if parent in self._leaves:
            del self._leaves[parent]
        else:
            self._followers[parent] = self._followers.get(parent, 1) + 1

    def _evict(self, count: int) -> None:
        """Give up ``count`` leaves, least recently sent first; a parent left without
        followers becomes a leaf at the front of the queue (so a cold chain goes tail first)."""
        followers, leaves = self._followers, self._leaves
        pop_leaf, pop_parent = leaves.popitem, self._parents.pop
        left = count
        while left > 0:
            h, _ = pop_leaf(last=False)
            left -= 1
            parent = pop_parent(h)
            # Up the chain: a parent left without followers would go to the front of the
            # queue and be the next leaf popped, so it is popped here at once (a cold
            # chain goes in one walk, never queued block by block).
            while parent is not None:
                n = followers.pop(parent, 1) - 1
                if n:
                    if n > 1:
                        followers[parent] = n
                    break
                if not left:
                    leaves[parent] = None
                    leaves.move_to_end(parent, last=False)
                    break
                left -= 1
                parent = pop_parent(parent)
        self.evicted_blocks += count


class PrefixSession:
    """One session's prompts, fingerprinted incrementally; from :meth:`PrefixIndex.session`.

    It learns which messages changed from a :class:`PromptCounter`: its own, or — to
    compare the history once per turn instead of twice — the one the session counts
    its prompt with. A shared one must have counted exactly the messages and tools
    passed to :meth:`observe`, after their last edit (as
    :class:`~agentflow.context.ContextBudget` does: count, apply policies, count, then
    observe); when it has not counted since the previous :meth:`observe`, this calls
    its :meth:`~PromptCounter.count` itself.

    **Each message is tokenized once.** Messages are rendered with the shared
    :class:`PromptCounter`'s :class:`MessageCounter` when it renders as the index's does
    (the same object, or tiktoken counters of the same encoding and overheads), so a
    message just counted comes from that counter's cache of recent token ids instead of
    being tokenized again; otherwise with the index's own counter.

    Args:
        index: the fleet-wide index.
        prompt: a shared :class:`PromptCounter`, or ``None`` for one of its own.

    Attributes:
        index: the fleet-wide index.
        prompt: the :class:`PromptCounter` it follows; its ``tokens`` is the prompt's count.
        cacheable_tokens: :meth:`observe`'s last answer.
    """

    __slots__ = (
        "_blocks",
        "_generation",
        "_kept",
        "_msg_blocks",
        "_msg_keys",
        "_msg_tails",
        "_render",
        "_seed",
        "_shared",
        "_started",
        "_tail",
        "cacheable_tokens",
        "index",
        "prompt",
    )

    def __init__(self, index: PrefixIndex, prompt: PromptCounter | None = None) -> None:
        self.index = index
        self._shared = prompt is not None
        self.prompt: PromptCounter = prompt if prompt is not None else index.counter.session()
        self._render = _renderer(index.counter, self.prompt.counter)
        self._generation = -1
        self._started = False
        # An int seed: Python's hash of ints (and tuples of ints) is the same in every
        # process, so fingerprints are reproducible.
        self._seed = hash((0x61676E74, index.block_size))
        self._blocks: list[int] = []
        #: Per message: full blocks before it, and the unfinished block's tokens there.
        self._msg_blocks: list[int] = []
        self._msg_tails: list[tuple[int, ...]] = []
        self._tail: list[int] = []
        #: Per message, its content as a key (see :func:`_freeze`); and by that key, the
        #: packed ids (4 bytes a token) of messages a rewrite hashed again unchanged.
        self._msg_keys: list[Hashable] = []
        self._kept: dict[Hashable, array[int]] = {}
        self.cacheable_tokens = 0

    @property
    def blocks(self) -> list[int]:
        """The block hashes of the last prompt observed (a copy)."""
        return list(self._blocks)

    def observe(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """Fingerprint the prompt about to be sent and record its blocks in the index.

        Returns:
            The most prompt tokens any prefix cache could serve for it: the leading
            blocks already sent before (by any session, this one's earlier turns
            included) × block size.
        """
        index = self.index
        prompt = self.prompt
        if (
            not self._shared
            or prompt.generation == self._generation
            or len(prompt) != len(messages)
        ):
            prompt.count(messages, tools)
        self._generation = prompt.generation
        first = prompt.take_changes()
        blocks = self._blocks
        rewrite = self._started
        if first < 0 or not self._started:
            # Tool schemas come first in the rendered prompt: everything changes.
            self._started = True
            start, tail = 0, list(self._render.render_tools(prompt.tools))
            first = 0
        elif first < len(self._msg_blocks):
            start, tail = self._msg_blocks[first], list(self._msg_tails[first])
        else:
            start, tail, rewrite = len(blocks), self._tail, False
        del blocks[start:]
        if rewrite:
            stale = set(self._msg_keys[first:])
            del self._msg_blocks[first:], self._msg_tails[first:], self._msg_keys[first:]
            self._extend(messages[first:], tail, stale)
            kept = self._kept
            if kept:
                live = set(self._msg_keys)
                for key in [k for k in kept if k not in live]:
                    del kept[key]
        else:
            if first == 0:
                self._msg_blocks.clear()
                self._msg_tails.clear()
                self._msg_keys.clear()
            self._extend(messages[first:], tail, None)
        cached = index.cached_prefix_blocks(blocks)
        index.record(blocks, cached)
        self.cacheable_tokens = cached * index.block_size
        return self.cacheable_tokens

    def _extend(
        self,
        messages: Sequence[Mapping[str, Any]],
        tail: list[int],
        stale: set[Hashable] | None,
    ) -> None:
        """Hash ``messages`` on from the chain's end, ``tail`` its unfinished block.

        On a rewrite (everything after the first changed message is hashed again),
        ``stale`` holds the keys of the messages that followed it before: a message among
        them, hashed again unchanged, keeps its ids packed and is taken from there the next
        time — a policy that rewrites an early message on every turn
        (``TruncateToolOutputs(all=False)``) rehashes what follows without tokenizing it
        again. Messages a rewrite changed are not kept: the next one starts after them.
        """
        size = self.index.block_size
        render = self._render.render
        kept = self._kept
        msg_keys = self._msg_keys
        blocks = self._blocks
        append = blocks.append
        h = blocks[-1] if blocks else self._seed
        if len(tail) >= size:  # the tool schemas, which come first
            full = len(tail) - len(tail) % size
            for block in zip(*[islice(tail, 0, full)] * size, strict=False):
                h = hash((h, block))
                append(h)
            tail = tail[full:]
        msg_blocks, msg_tails = self._msg_blocks, self._msg_tails
        for message in messages:
            msg_blocks.append(len(blocks))
            msg_tails.append(tuple(tail))
            # The message's ids as the counter rendered them: hashed where they lie, never
            # copied (a 20k-token tool output is 1,250 blocks).
            key = _freeze(message)
            msg_keys.append(key)
            ids: Sequence[int] | None = None
            if stale is not None:
                ids = kept.get(key)
                if ids is None and key in stale:
                    ids = render(message)
                    with suppress(OverflowError):  # ids beyond 32 bits: not kept
                        kept[key] = array("i", ids)
            if ids is None:
                ids = render(message)
            n = len(ids)
            start = 0
            if tail:
                start = size - len(tail)
                if n < start:
                    tail = [*tail, *ids]
                    continue
                h = hash((h, (*tail, *ids[:start])))
                append(h)
            full = n - (n - start) % size
            # zip over one iterator, ``size`` times: the blocks as tuples, built in C.
            for block in zip(*[islice(ids, start, full)] * size, strict=False):
                h = hash((h, block))
                append(h)
            tail = list(ids[full:])
        self._tail = tail


def _renderer(own: MessageCounter, theirs: MessageCounter) -> MessageCounter:
    """The counter a tracker renders with: ``theirs`` (the shared :class:`PromptCounter`'s,
    whose cache holds the ids of the message it just counted) when it renders every message
    into the same ids as the index's ``own``, else ``own``."""
    if theirs is own:
        return own
    a, b = own.counter, theirs.counter
    same = (
        type(a) is TiktokenCounter
        and type(b) is TiktokenCounter
        and a.name == b.name
        and (own.per_message, own.per_name, own.per_image)
        == (theirs.per_message, theirs.per_name, theirs.per_image)
    )
    return theirs if same else own
