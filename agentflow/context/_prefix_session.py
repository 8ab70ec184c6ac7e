"""One session's prompts as a chain of block hashes, kept up to date turn by turn.

What the blocks are and why: :mod:`~agentflow.context._fingerprint`; the index they are
looked up in and recorded to: :class:`~agentflow.context._prefix_index.PrefixIndex`.

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
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Mapping, Sequence
from contextlib import suppress
from itertools import islice
from typing import TYPE_CHECKING, Any

from agentflow.context._counting import TiktokenCounter
from agentflow.context._messages import MessageCounter, _freeze
from agentflow.context._prompt import PromptCounter

if TYPE_CHECKING:
    from agentflow.context._prefix_index import PrefixIndex, _Run

__all__ = ["PrefixSession"]

#: A message of at most this many tokens has its ids kept packed from the start (4 bytes a
#: token): a rewrite before it hashes it again without rendering (tokenizing) it again.
_SMALL = 256


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
