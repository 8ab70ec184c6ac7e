"""A history rewrite as a run store records it: a delta against the history before the
context policy ran, not the whole history again.

A context policy that rewrites a session's history (drops the oldest rounds, cuts a tool
output, puts a summary in) keeps most of the messages as they were. A turn's record
(``TurnFinished.rewrite``, the ``turns.rewrite`` column) therefore holds a list whose
items are either

- a message (a JSON object): a message the policy made (new or changed), or
- ``[start, stop]`` (two integers): the run ``before[start:stop]`` of the history before
  the policy ran, kept as it was, in order.

The history sent is those items in order. Recording the whole history again on every
turn of a policy working at the window made the store grow with the square of a
session's length, and each such turn encode, checksum and copy the whole history (~4 MB
at a 1M-token window) on the event loop. A list of messages with no ranges — what stores
written by earlier releases hold — is a delta too, and reads as it always did.

Which messages were kept is decided by identity (``is``), as
:func:`~agentflow._session_turn.model_turn` decides that a rewrite happened at all: the
context links replace, insert and remove messages, never edit one in place (an edit in
place is not seen, by either). At its own place, a message equal to the one before
counts as kept too: it reads back the same.
:func:`apply_rewrite` is the one reader (``agentflow.store``'s ``turn_prompts``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from agentflow._common_runs import common_prefix, common_suffix

__all__ = ["RewriteItem", "apply_rewrite", "rewrite_delta"]

#: One item of a recorded rewrite: a message, or a ``(start, stop)`` run of the history
#: before it (a list ``[start, stop]`` once read back from the store's JSON).
RewriteItem: TypeAlias = Mapping[str, Any] | tuple[int, int]


def rewrite_delta(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[RewriteItem]:
    """``after`` as a delta against ``before`` (see the module): each longest run of
    messages of ``before`` that ``after`` keeps, in the same order, becomes a
    ``(start, stop)`` pair; every other message is an item itself. O(len(before) +
    len(after)).

    The kept prefix and suffix are found with C-level list comparisons (each message
    compared by identity first: a message equal to the one at its place reads back the
    same, so it counts as kept too); only the messages between them are looked up, by
    ``id()`` — both lists hold their messages for the whole call, so an id names one
    object, and the ``is`` check after the lookup makes sure. A policy that drops the
    oldest rounds, or cuts or replaces a few messages, costs two binary searches over
    slices and a lookup per message between them: at 2,000 messages (1M tokens) ~0.03 ms
    here for a dropped round and ~0.13 ms for two results cut 200 messages apart, against
    ~0.4 ms for a lookup of every message — and ~45 ms to record the whole history.
    """
    b = before if isinstance(before, list) else list(before)
    a = after if isinstance(after, list) else list(after)
    nb, na = len(b), len(a)
    head = common_prefix(a, b)
    tail = common_suffix(a, b, min(na, nb) - head)
    out: list[RewriteItem] = []
    start, stop = 0, head  # the run being extended: before[start:stop]
    if head < na - tail:
        where = {id(b[i]): i for i in range(head, nb - tail)}
        for k in range(head, na - tail):
            m = a[k]
            i = where.get(id(m))
            if i is not None and b[i] is m:
                if i == stop:
                    stop += 1
                    continue
                if stop > start:
                    out.append((start, stop))
                start, stop = i, i + 1
                continue
            if stop > start:
                out.append((start, stop))
            start = stop = 0
            out.append(m)
    if tail:
        if stop == nb - tail:
            stop = nb
        else:
            if stop > start:
                out.append((start, stop))
            start, stop = nb - tail, nb
    if stop > start:
        out.append((start, stop))
    return out


def apply_rewrite(delta: object, before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history ``delta`` (as read back from a store) describes, against ``before``:
    its messages copied, its ranges the very objects of ``before``.

    Raises:
        ValueError: ``delta`` is not such a list — not a list, an item neither a message
            nor two integers, a range with ``stop < start`` or outside ``before``. It
            says which item and why; the caller names the turn.
    """
    if not isinstance(delta, list | tuple):
        raise ValueError(f"it is not a list but {type(delta).__name__}")
    out: list[dict[str, Any]] = []
    for k, item in enumerate(delta):
        if isinstance(item, dict):
            out.append(dict(item))
            continue
        if (
            not isinstance(item, list | tuple)
            or len(item) != 2
            or type(item[0]) is not int
            or type(item[1]) is not int
        ):
            raise ValueError(
                f"item {k} is neither a message nor a [start, stop] pair of integers: "
                f"{_short(item)}"
            )
        start, stop = item
        if not 0 <= start <= stop <= len(before):
            raise ValueError(
                f"item {k}, range [{start}, {stop}], is not within the {len(before)} "
                "messages before it"
            )
        out.extend(before[start:stop])
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
