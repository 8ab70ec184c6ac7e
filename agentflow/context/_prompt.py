"""One session's prompt count, kept up to date incrementally: :class:`PromptCounter`.

A :class:`PromptCounter` (from :meth:`MessageCounter.session`) follows one session's
growing history: it keeps a snapshot of each message it counted and, each turn, finds
the first message that differs from its snapshot with C-level list comparisons (one
``==`` over the whole list; a binary search over prefix slices only when something
changed), then counts only the messages from there on. Appending costs O(new tokens)
plus that comparison; a rewrite costs O(tokens after the first changed message). What
"differs" means is the ``check``:

- ``"identity"`` (default): the snapshot is the message object itself, so a message is
  unchanged while the list holds the same dict — replaced, inserted and removed
  messages are seen, edits inside a message are not. ~5–10 ns per message (the
  unchanged ones are compared by pointer, never touched): ~17 µs for the 2,000 messages
  of a 1M-token session, so a turn's cost hardly grows with its history.
- ``"values"``: a shallow copy: assigning a field (``msg["content"] = …``) is seen too,
  but not an edit inside a nested list (``msg["tool_calls"][0]["function"][…] = …``).
  ~0.1–0.25 µs per message.
- ``"deep"``: a structural copy (dicts and lists copied, strings shared): any edit is
  seen; ~0.2–0.4 µs per message (tool calls nest three levels deep).

agentflow's own writers — the session loop and the overflow policies — only append,
replace and remove messages, never edit one in place; code that edits messages in place
should pick ``"values"`` or ``"deep"``. The snapshots share the session's objects; a
:class:`PromptCounter` is freed with its session.

**Adopting the caller's copy.** Whoever else counts with a session's counter may pass an
equal copy of a message the session will hold: a budget's prefix tracker counts the prompt
followed by the turn's reply, built from the trace, before the session appends its own
dict for it. ``"identity"`` then still finds the two equal — by value. So that this
happens once and not on every later turn (every past reply compared field by field, twice
a turn: a cost growing with the history), the next :meth:`PromptCounter.count` checks the
snapshots of the messages the previous count had to count (new objects: after a rewrite,
not the history it found by ``id``) and takes the caller's object in place of an equal
copy: one pointer check per new message.

**Its own counts.** With ``"identity"``, a message is known by the object itself: the
counts of the messages it holds are kept by their ``id()`` (one entry per message of
the history, never more; an ``id()`` is unique while its object is held). A rewrite —
messages dropped, one replaced — recounts from the first change, but a message still
there (the same object) keeps its count: only the new ones are tokenized, whatever the
shared :class:`MessageCounter` cache has evicted meanwhile (other sessions' messages);
:meth:`PromptCounter.count_of` gives an overflow policy the same counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from agentflow._errors import ConfigError

if TYPE_CHECKING:
    from agentflow.context._messages import MessageCounter

__all__ = ["ChangeCheck", "PromptCounter"]

#: How a :class:`PromptCounter` tells that a message changed since it was counted:
#: ``"identity"`` (it was replaced), ``"values"`` (also: a field was assigned) or
#: ``"deep"`` (any edit). See the module documentation for what each costs.
ChangeCheck: TypeAlias = Literal["identity", "values", "deep"]


def _copy(obj: Any) -> Any:
    """A structural copy (dicts and lists copied, leaves shared) to compare against later."""
    t = type(obj)
    if t is str or obj is None:
        return obj
    if t is dict or (t is not list and isinstance(obj, Mapping)):
        return {k: _copy(v) for k, v in obj.items()}
    if t is list:
        return [_copy(v) for v in obj]
    return obj


def _same(obj: Any) -> Any:
    return obj


def _shallow(obj: Any) -> Any:
    return dict(obj) if isinstance(obj, Mapping) else obj


_SNAPSHOTS = {"identity": _same, "values": _shallow, "deep": _copy}


class PromptCounter:
    """One session's prompt count, kept up to date incrementally; from
    :meth:`MessageCounter.session`.

    It can also hold an *anchor*: the server's own count of a prompt it counted
    (:meth:`anchor`, after the turn). While the history only grows past the anchored
    prompt, :attr:`anchor_point` lets a :class:`~agentflow.context.Calibrator` estimate
    the next prompt as the server's figure plus the estimated growth — the error is then
    only that of the few new messages.

    Args:
        counter: the :class:`MessageCounter` it counts with.
        check: what counts as a changed message (:data:`ChangeCheck`).

    Attributes:
        counter: the :class:`MessageCounter` it counts with.
        check: what counts as a changed message.
        generation: how many times :meth:`count` ran.
        tokens: the prompt's count at the last :meth:`count`.
        first_changed: the index of the first message that was new or differed at the
            last :meth:`count` (its length when nothing changed).
        anchor_point: ``(tokens, reported)`` — the local count of the anchored prompt and
            the server's — while every message of that prompt is still unchanged; else
            ``None``.
    """

    __slots__ = (
        "_anchor_len",
        "_by_id",
        "_counts",
        "_fresh",
        "_low",
        "_prefix",
        "_snap",
        "_snaps",
        "_tools_count",
        "_tools_snap",
        "anchor_point",
        "check",
        "counter",
        "first_changed",
        "generation",
        "tokens",
    )

    def __init__(self, counter: MessageCounter, *, check: ChangeCheck = "identity") -> None:
        snap = _SNAPSHOTS.get(check)
        if snap is None:
            raise ConfigError(
                f"PromptCounter.check must be one of {sorted(_SNAPSHOTS)}, got {check!r}"
            )
        self.counter = counter
        self.check = check
        self._snap = snap
        self.generation = 0
        self._low = -1
        self._snaps: list[Any] = []
        self._counts: list[int] = []
        #: ``id(message) → count`` of the messages in ``_snaps`` ("identity" only): each key
        #: is the id of an object held there, so it is that object's alone.
        self._by_id: dict[int, int] | None = {} if check == "identity" else None
        self._prefix: list[int] = [0]
        #: Where the snapshots of the messages the last :meth:`count` had to count are
        #: (new objects, not held before): the ones the next count checks against the
        #: caller's objects ("identity" only; see the module).
        self._fresh: list[int] = []
        self._tools_snap: list[Any] | None = None
        self._tools_count = 0
        self.tokens = 0
        self.first_changed = 0
        self.anchor_point: tuple[int, int] | None = None
        self._anchor_len = 0

    def changed_from(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """The index of the first message that differs from the last call's (new,
        replaced or, as far as :attr:`check` sees, edited); ``len(messages)`` when none
        does. Leaves the snapshots as they were."""
        snaps = self._snaps
        k = len(snaps)
        msgs = messages if isinstance(messages, list) else list(messages)
        if k <= len(msgs):
            if self.check == "identity":
                # Compare equal-length lists: CPython then skips identical items by
                # pointer, without touching them — a slice of ``msgs`` would bump every
                # message's reference count, a cache miss each on a long history.
                snaps += msgs[k:]
                try:
                    if msgs == snaps:
                        return k
                finally:
                    del snaps[k:]
            elif msgs[:k] == snaps:
                return k
        else:
            k = len(msgs)
            if msgs == snaps[:k]:
                return k
        # The longest equal prefix is shorter than k: binary search, msgs[:lo] equal.
        lo, hi = 0, k - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if msgs[:mid] == snaps[:mid]:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def count(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """The prompt's tokens (as :meth:`MessageCounter.count_prompt`), counting only the
        messages from the first one that changed since the last call."""
        first = self.changed_from(messages)
        self.first_changed = first
        self.generation += 1
        if first < self._low:
            self._low = first
        by_id = self._by_id
        if self._fresh:
            self._adopt(messages, self._fresh, first)
        fresh: list[int] = []
        self._fresh = fresh
        gone: list[Any] = []
        if first < len(self._snaps):
            # Held until the loop below is done, so that no id among them is reused yet.
            gone = self._snaps[first:]
            del self._snaps[first:]
            del self._counts[first:]
            del self._prefix[first + 1 :]
        count = self.counter.count_message
        snap = self._snap
        snaps, counts, prefix = self._snaps, self._counts, self._prefix
        total = prefix[-1]
        for m in messages[first:]:
            # A message still there after a rewrite keeps its count: no cache lookup.
            n = by_id.get(id(m)) if by_id is not None else None
            if n is None:
                n = count(m)
                if by_id is not None:
                    fresh.append(len(snaps))
            snaps.append(snap(m))
            counts.append(n)
            total += n
            prefix.append(total)
        if by_id is not None:
            if gone:
                # Forget the ones dropped (and any duplicate of them kept before ``first``:
                # it is counted again if asked for — never a stale count).
                kept = {id(m) for m in messages[first:]}
                for g in gone:
                    if id(g) not in kept:
                        by_id.pop(id(g), None)
            for m, n in zip(messages[first:], counts[first:], strict=True):
                by_id[id(m)] = n
        tools_list = list(tools)
        if tools_list != self._tools_snap:
            self._tools_count = self.counter.count_tools(tools_list)
            self._tools_snap = _copy(tools_list)
            self.anchor_point = None
            self._low = -1
        if first < self._anchor_len:
            self.anchor_point = None
        self.tokens = total + self._tools_count + self.counter.reply_priming
        return self.tokens

    def _adopt(self, messages: Sequence[Mapping[str, Any]], fresh: list[int], end: int) -> None:
        """Take ``messages[i]`` for each ``i`` in ``fresh`` below ``end`` — found equal to
        their snapshots — as the snapshots where they are other objects (equal copies),
        keeping their counts: from then on they are compared by pointer (see the module).
        Only the messages the last count had to count (after a rewrite, not the history
        it found by ``id``)."""
        snaps, counts, by_id = self._snaps, self._counts, self._by_id
        assert by_id is not None
        for i in fresh:
            if i >= end:
                break
            m, old = messages[i], snaps[i]
            if m is not old:
                # ``old`` is held until its id is dropped, so that no id is reused yet (a
                # duplicate of it elsewhere is counted again if asked for: never stale).
                snaps[i] = m
                by_id.pop(id(old), None)
                by_id[id(m)] = counts[i]

    def anchor(self, reported: int | None) -> None:
        """Record the server's count (``usage.prompt_tokens``) of the prompt last counted;
        ``None`` or a non-positive figure clears the anchor."""
        if reported is None or reported <= 0:
            self.anchor_point = None
            return
        self.anchor_point = (self.tokens, reported)
        self._anchor_len = len(self._snaps)

    def take_changes(self) -> int:
        """The lowest message index :meth:`count` found changed since the previous call
        of this method (``-1`` when the tools changed, or on the first call), and start
        over. For one consumer that follows the same prompt, such as a
        :class:`~agentflow.context.PrefixSession`."""
        low, self._low = self._low, len(self._snaps)
        return low

    @property
    def tools(self) -> list[Any]:
        """The tool schemas of the last :meth:`count` (its snapshot; do not modify)."""
        return self._tools_snap or []

    def count_of(self, message: Mapping[str, Any]) -> int | None:
        """The count of ``message`` if it is one of the messages last counted (the same
        object; ``"identity"`` check only), else ``None``: a dict lookup, no tokenizing."""
        by_id = self._by_id
        return by_id.get(id(message)) if by_id is not None else None

    def message_counts(self) -> list[int]:
        """Each message's count at the last :meth:`count` (a copy)."""
        return list(self._counts)

    def __len__(self) -> int:
        return len(self._snaps)
