"""The fleet-wide prefix index: every block of every prompt sent, bounded, as a tree.

Blocks and their hashes are :mod:`~agentflow.context._fingerprint`'s (the overview); a
session's tracker (:class:`~agentflow.context._prefix_session.PrefixSession`) hashes its
prompts into blocks, and :class:`PrefixIndex` answers how many leading blocks were sent
before and records the rest.

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
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow.context._counting import TiktokenCounter, TokenCounter
from agentflow.context._messages import MessageCounter
from agentflow.context._prefix_session import PrefixSession

if TYPE_CHECKING:
    from agentflow.context._prompt import PromptCounter

__all__ = ["DEFAULT_CAPACITY_TOKENS", "PrefixIndex", "check_message_counter"]

#: The default bound of a :class:`PrefixIndex`, in tokens.
DEFAULT_CAPACITY_TOKENS = 4_000_000


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


def check_message_counter(counter: object, where: str) -> None:
    """Raise :class:`ConfigError` naming ``where`` unless ``counter`` is ``None`` or a
    :class:`MessageCounter` (anything else failed with an AttributeError at a session's
    first turn); a text counter (``TiktokenCounter()``) is told to wrap it."""
    if counter is not None and not isinstance(counter, MessageCounter):
        text = isinstance(counter, TokenCounter) and not isinstance(counter, str)
        hint = " (wrap a text counter: MessageCounter(counter))" if text else ""
        raise ConfigError(f"{where} must be a MessageCounter or None{hint}, got {counter!r:.80}")


class PrefixIndex:
    """Block hashes of every prompt sent, fleet-wide and bounded; share one per server.

    Not thread-safe: use it from one event loop.

    Args:
        counter: renders prompts into tokens (default: ``cl100k_base`` with OpenAI's
            template overheads).
        block_size: tokens per block (vLLM's default is 16).
        capacity_tokens: the most tokens of distinct blocks held (whole blocks).

    Raises:
        ConfigError: a block size below 1, a capacity below one block, or a counter that
            is not a :class:`MessageCounter`.
    """

    def __init__(
        self,
        counter: MessageCounter | None = None,
        *,
        block_size: int = 16,
        capacity_tokens: int = DEFAULT_CAPACITY_TOKENS,
    ) -> None:
        check_count(block_size, "PrefixIndex.block_size")
        if (
            isinstance(capacity_tokens, bool)
            or not isinstance(capacity_tokens, int)
            or capacity_tokens < block_size
        ):
            raise ConfigError(
                f"PrefixIndex.capacity_tokens must be an int >= block_size ({block_size}), "
                f"got {capacity_tokens!r}"
            )
        check_message_counter(counter, "PrefixIndex.counter")
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
