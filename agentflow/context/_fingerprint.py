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
both (see :class:`PrefixSession`). The hash is Python's own ``hash`` of the pair
``(previous hash, block)``, the block a tuple of its token ids — 64 bits, deterministic
for integers across processes, and the fastest of the candidates measured (unpacking the
ids into the tuple, as vLLM's ``builtin`` block-hash option does, costs ~20% more; and
``hashlib.blake2b`` and ``sha256`` over packed ids 2–2.5× as much per block;
``benchmarks/token_accounting.py``). A rewrite keeps the packed ids (4 bytes a token) of the
messages it hashed again unchanged, and small messages (calls, replies) keep theirs from the
start, so that an early rewrite on every turn does not tokenize what follows it every turn,
nor a sweep of cuts the replies between them.

**Bounded.** The index holds at most ``capacity_tokens`` of distinct blocks (default
4,000,000 — room for a few 1M-token sessions; set it to your server's KV capacity, see
the planner) as a tree of *runs*: a run is a stretch of blocks nothing branches from but
its last, packed in an ``array`` (8 bytes a block, nothing for the garbage collector to
walk), with the runs that follow it keyed by their first block. A chain that continues a
leaf grows its run; one that branches inside a run splits it in two. Only *leaves* —
blocks nothing follows, the last blocks of runs nothing follows — can be evicted, least
recently sent first, and a leaf's parent that becomes a leaf goes to the front of the
queue: a cold conversation is given up from its tail, as vLLM frees a finished
sequence's blocks tail first, while a prefix that any other conversation continues
stays. So the blocks held always form whole prefixes. "The leading blocks seen before"
is found by walking the tree along the chain, comparing packed runs; a session's tracker
starts the walk where its previous chain's unchanged part ends (found from the run that
holds that chain's last block, checked by one hash), so a turn costs O(new blocks) —
compared in C, and appended to a run — not a dictionary entry per block.
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

#: A message of at most this many tokens has its ids kept packed from the start (4 bytes a
#: token): a rewrite before it hashes it again without rendering (tokenizing) it again.
_SMALL = 256


class _Run:
    """A run of held blocks that nothing branches from but its last: a node of the index's
    tree with its blocks packed (8 bytes a block, nothing for the collector to walk).

    ``depth`` is the chain position of its first block; its children (runs that follow its
    last block) are keyed by their first block; ``key`` is its own first block, under
    which its parent (or the index's roots) holds it.
    """

    __slots__ = ("alive", "blocks", "children", "depth", "key", "parent")

    def __init__(self, blocks: array[int], parent: _Run | None, depth: int) -> None:
        self.blocks = blocks
        self.parent = parent
        self.depth = depth
        self.key = blocks[0]
        self.children: dict[int, _Run] = {}
        self.alive = True


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
        #: runs that begin a chain, by first block
        self._roots: dict[int, _Run] = {}
        #: runs nothing follows (their last block is a leaf), least recently sent first
        self._queue: OrderedDict[_Run, None] = OrderedDict()
        self._held = 0
        #: Blocks given up to stay within capacity, since creation.
        self.evicted_blocks = 0

    @property
    def held_tokens(self) -> int:
        """Tokens of the distinct blocks held now."""
        return self._held * self.block_size

    def __len__(self) -> int:
        """Distinct blocks held."""
        return self._held

    def __contains__(self, block_hash: object) -> bool:
        """Whether ``block_hash`` is held (a walk over every run: for tests and debugging)."""
        return any(block_hash in run.blocks for run in self._runs())

    def session(self, prompt: PromptCounter | None = None) -> PrefixSession:
        """A tracker for one session's prompts; drop it when the session ends.

        Args:
            prompt: the session's own :class:`PromptCounter`, to share its check of what
                changed (see :class:`PrefixSession`); by default the tracker keeps one.
        """
        return PrefixSession(self, prompt)

    def cached_prefix_blocks(self, blocks: Sequence[int]) -> int:
        """How many leading ``blocks`` are held (a walk down the tree from its roots,
        comparing packed runs: O(len(blocks)) in C)."""
        return self._walk(blocks, 0, None, 0)[0]

    def record(self, blocks: Sequence[int], start: int = 0) -> None:
        """Record a prompt's block chain as sent. Evicts over capacity.

        ``start`` (how many leading blocks are held already, as
        :meth:`cached_prefix_blocks` says) is accepted as before but not needed: the chain
        is followed down the tree from its roots, and what is not held yet is recorded.
        """
        i, run, k = self._walk(blocks, 0, None, 0)
        self._attach(blocks, i, run, k)

    # -- the tree -------------------------------------------------------------------------

    def _walk(
        self, blocks: Sequence[int], i: int, run: _Run | None, k: int
    ) -> tuple[int, _Run | None, int]:
        """Follow ``blocks`` down from ``blocks[:i]``, held and ending at ``run.blocks[:k]``
        (``None``, 0: at the roots): how many leading blocks are held, and where the last
        of them lies."""
        n = len(blocks)
        while i < n:
            if run is None or k == len(run.blocks):
                nxt = (self._roots if run is None else run.children).get(blocks[i])
                if nxt is None:
                    break
                run, k = nxt, 0
            have = run.blocks
            m = min(len(have) - k, n - i)
            if have[k : k + m] == array("q", blocks[i : i + m]):
                i += m
                k += m
                continue
            # They differ within m blocks: halve the range by slices, then step.
            lo, hi = 0, m
            while hi - lo > 32:
                mid = (lo + hi) // 2
                if have[k + lo : k + mid] == array("q", blocks[i + lo : i + mid]):
                    lo = mid
                else:
                    hi = mid
            i, k = i + lo, k + lo
            while have[k] == blocks[i]:  # stops before hi: they differ there
                i += 1
                k += 1
            break
        return i, run, k

    def _attach(self, blocks: Sequence[int], i: int, run: _Run | None, k: int) -> _Run | None:
        """Record ``blocks[i:]`` after ``blocks[:i]``, which end at ``run.blocks[:k]``;
        return the run that holds the chain's last block."""
        queue = self._queue
        n = len(blocks)
        if i == n:  # nothing new: the chain's last block, if a leaf, was sent last
            if run is not None and k == len(run.blocks) and run in queue:
                queue.move_to_end(run)
            return run
        new = array("q", blocks[i:])
        if run is None:
            last = _Run(new, None, 0)
            self._roots[last.key] = last
            queue[last] = None
        elif k < len(run.blocks):
            # A branch inside a run: it splits. The run keeps its tail (and its place in
            # the queue); a new run takes its head, and the branch follows that.
            head = _Run(run.blocks[:k], run.parent, run.depth)
            siblings = self._roots if run.parent is None else run.parent.children
            siblings[head.key] = head
            del run.blocks[:k]
            run.depth += k
            run.key = run.blocks[0]
            run.parent = head
            head.children[run.key] = run
            last = _Run(new, head, run.depth)
            head.children[last.key] = last
            queue[last] = None
        elif run.children:  # after a run others already follow: one more follows it
            last = _Run(new, run, run.depth + k)
            run.children[last.key] = last
            queue[last] = None
        else:  # after a leaf: the run grows, and is the most recently sent
            run.blocks.extend(new)
            queue.move_to_end(run)
            last = run
        self._held += n - i
        over = self._held - self._capacity_blocks
        if over > 0:
            self._evict(over)
        return last

    def _evict(self, count: int) -> None:
        """Give up ``count`` leaves, least recently sent first: the front run's tail; a run
        left empty goes, and its parent, if nothing else follows it, becomes a leaf at the
        front of the queue (so a cold chain goes tail first)."""
        queue, roots = self._queue, self._roots
        self.evicted_blocks += count
        self._held -= count
        while count > 0:
            run = next(iter(queue))
            blocks = run.blocks
            if count < len(blocks):
                del blocks[len(blocks) - count :]
                return
            count -= len(blocks)
            del blocks[:]
            del queue[run]
            run.alive = False
            parent = run.parent
            if parent is None:
                del roots[run.key]
                continue
            del parent.children[run.key]
            if not parent.children:
                queue[parent] = None
                queue.move_to_end(parent, last=False)

    def _runs(self) -> list[_Run]:
        """Every run, parents before children."""
        out: list[_Run] = []
        todo = list(self._roots.values())
        while todo:
            run = todo.pop()
            out.append(run)
            todo.extend(run.children.values())
        return out

    # Block-level views, for tests and debugging (built on each access).

    @property
    def _parents(self) -> dict[int, int | None]:
        """Block → the block before it in its chain (``None`` for a chain's first)."""
        out: dict[int, int | None] = {}
        for run in self._runs():
            prev = run.parent.blocks[-1] if run.parent is not None else None
            for h in run.blocks:
                out[h] = prev
                prev = h
        return out

    @property
    def _followers(self) -> dict[int, int]:
        """Block → how many blocks follow it, where two or more do."""
        return {run.blocks[-1]: len(run.children) for run in self._runs() if len(run.children) > 1}

    @property
    def _leaves(self) -> list[int]:
        """The blocks nothing follows, least recently sent first."""
        return [run.blocks[-1] for run in self._queue]


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
        "_last",
        "_msg_blocks",
        "_msg_ids",
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
        #: Per message, its content as a key (see :func:`_freeze`), and its ids packed (4
        #: bytes a token) if a rewrite hashed it again unchanged, else None.
        self._msg_keys: list[Hashable] = []
        self._msg_ids: list[array[int] | None] = []
        #: The run that holds the last chain's last block, as recorded.
        self._last: _Run | None = None
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
            # What followed the first change before: by content, and its packed ids.
            keys, packed = self._msg_keys[first:], self._msg_ids[first:]
            stale: dict[Hashable, array[int] | None] = dict(zip(keys, packed, strict=True))
            del self._msg_blocks[first:], self._msg_tails[first:]
            del self._msg_keys[first:], self._msg_ids[first:]
            self._extend(messages[first:], tail, stale)
        else:
            if first == 0:
                self._msg_blocks.clear()
                self._msg_tails.clear()
                self._msg_keys.clear()
                self._msg_ids.clear()
            self._extend(messages[first:], tail, None)
        # Where blocks[:start], unchanged since the last chain recorded, lie in the index:
        # found from that chain's last run, up its parents, and checked by one block
        # (equal hashes, equal prefixes); else (given up since) a walk from the roots.
        i, run, k = 0, None, 0
        last = self._last
        if start > 0 and last is not None:
            while last is not None and last.depth >= start:
                last = last.parent
            if last is not None:
                k = start - last.depth
                if last.alive and k <= len(last.blocks) and last.blocks[k - 1] == blocks[start - 1]:
                    i, run = start, last
                else:
                    k = 0
        cached, run, k = index._walk(blocks, i, run, k)
        self._last = index._attach(blocks, cached, run, k)
        self.cacheable_tokens = cached * index.block_size
        return self.cacheable_tokens

    def _extend(
        self,
        messages: Sequence[Mapping[str, Any]],
        tail: list[int],
        stale: dict[Hashable, array[int] | None] | None,
    ) -> None:
        """Hash ``messages`` on from the chain's end, ``tail`` its unfinished block.

        On a rewrite (everything after the first changed message is hashed again),
        ``stale`` holds the messages that followed it before (by content, with their
        packed ids if kept): a message among them, hashed again unchanged, keeps its ids
        packed and is taken from there the next time — a policy that rewrites an early
        message on every turn (``TruncateToolOutputs(all=False)``) rehashes what follows
        without tokenizing it again. Messages a rewrite changed are not kept: the next one
        starts after them. A message's packed ids go with its place in the prompt.
        """
        size = self.index.block_size
        render = self._render.render
        msg_keys, msg_ids = self._msg_keys, self._msg_ids
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
            ids: Sequence[int]
            pack: array[int] | None = None
            if stale is not None and key in stale:  # unchanged: kept packed
                pack = stale[key]
                if pack is None:
                    ids = render(message)
                    with suppress(OverflowError):  # ids beyond 32 bits: not kept
                        pack = array("i", ids)
                else:
                    ids = pack
            else:
                ids = render(message)
                if len(ids) <= _SMALL:  # a reply, a call: kept, so a rewrite never renders it
                    with suppress(OverflowError):
                        pack = array("i", ids)
            msg_ids.append(pack)
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
