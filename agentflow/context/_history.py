"""The shape of a conversation that overflow policies must respect.

A history is a pinned prefix — the leading system message(s), then optionally the first
few other messages — followed by *units*: the smallest runs of messages a policy may
remove or summarise without leaving the conversation invalid. An assistant message
with ``tool_calls`` and the ``tool`` messages answering it form one unit (servers
reject a tool result whose call is gone, and a call without its result); every other
message is a unit of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["check_pairing", "pinned_length", "split_units", "system_length"]

_SYSTEM_ROLES = frozenset({"system", "developer"})


def system_length(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many of ``messages`` are leading system (or developer) messages."""
    n = 0
    while n < len(messages) and messages[n].get("role") in _SYSTEM_ROLES:
        n += 1
    return n


def pinned_length(
    messages: Sequence[Mapping[str, Any]], pin_first: int, *, system: int | None = None
) -> int:
    """How many leading messages are pinned: the system messages, then ``pin_first`` more.

    Args:
        messages: the conversation.
        pin_first: messages after the leading system message(s) that are pinned too
            (1 pins the task a user gave first). A pinned assistant tool call takes its
            results into the prefix with it.
        system: how many leading messages are the system prompt, when known from how the
            conversation began (a system-role summary a policy put after them is not
            part of it); ``None``: the leading system messages of ``messages``.
    """
    n_system = system_length(messages) if system is None else min(system, len(messages))
    n = min(len(messages), n_system + pin_first)
    if n > n_system:
        # Never end inside a unit: a pinned tool call takes its results along.
        for begin, end in split_units(messages, n_system):
            if begin < n <= end:
                return end
            if begin >= n:
                break
    return n


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    return [str(c.get("id")) for c in message.get("tool_calls") or ()]


def split_units(messages: Sequence[Mapping[str, Any]], start: int) -> list[tuple[int, int]]:
    """The units of ``messages[start:]`` as ``(begin, end)`` index pairs, in order.

    An assistant message with tool calls takes the ``tool`` messages right after it that
    answer one of its calls; any other message stands alone.

    Args:
        messages: the conversation.
        start: where the units begin (the pinned prefix's length).
    """
    units: list[tuple[int, int]] = []
    i, n = start, len(messages)
    while i < n:
        j = i + 1
        ids = _call_ids(messages[i]) if messages[i].get("role") == "assistant" else []
        if ids:
            pending = set(ids)
            while j < n and messages[j].get("role") == "tool":
                if messages[j].get("tool_call_id") not in pending:
                    break
                j += 1
        units.append((i, j))
        i = j
    return units


def check_pairing(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """What is wrong with the tool-call/result pairing of ``messages``, or ``None``.

    Every ``tool`` message must answer a call of the nearest assistant message before
    it (with only other results in between), and every call of an assistant message
    that is followed by another message must have its result. A trailing assistant
    message whose calls are still running is valid. Call ids are counted, not merely
    collected: some servers give two calls of one turn the same id, and then two
    results answer it.
    """
    open_ids: Counter[str] = Counter()
    open_at = -1
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            call_id: Any = m.get("tool_call_id")
            if open_ids.get(call_id, 0) <= 0:
                return (
                    f"messages[{i}] is a tool result for {call_id!r}, which no call before it made"
                )
            open_ids[call_id] -= 1
            continue
        if +open_ids:
            return (
                f"messages[{open_at}] calls {sorted(+open_ids)} but messages[{i}] "
                "follows before their results"
            )
        if role == "assistant":
            open_ids = Counter(_call_ids(m))
            open_at = i
    return None
