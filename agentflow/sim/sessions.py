"""Tool rounds per conversation, remembered by session id across compactions.

The simulated model calls tools for ``tool_rounds`` assistant turns, then answers. It
counts the rounds so far from the request's messages — every assistant message with
``tool_calls`` — which is all a stateless server can see. A client that compacts its
history (replaces old tool rounds with a summary) or drops old turns makes those rounds
disappear from view, so a stateless count falls back, the model calls tools again, and an
agent that compacts every few rounds never gets its final answer.

So when a request names its conversation — the ``X-Session-ID`` header agentflow's
router sends with every turn — the server remembers which rounds it has *seen* in that
conversation: the id of each round's first tool call. A round that a later request no
longer shows still counts. The count is

    rounds so far = |rounds seen in this session's requests, this one included|

which equals the visible count for a client that never rewrites its history, is the same
for a retried request (it shows the same rounds), and does not fall when a compaction or
a dropped turn hides rounds. Without the header the count is the visible one, as before.

Memory is bounded: at most ``max_sessions`` conversations are remembered (least recently
used forgotten first; a forgotten one starts again from what its next request shows), each
with at most ``max_rounds`` round ids, and a session id longer than 64 characters is kept
as its BLAKE2b digest.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow._counts import check_count

__all__ = ["SESSION_HEADER", "SessionRounds", "round_keys"]

#: The request header that names a conversation (what agentflow's router sends).
SESSION_HEADER = "X-Session-ID"

_MAX_KEY_CHARS = 64


def round_keys(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """One key per tool round shown in ``messages`` (an assistant message with
    ``tool_calls``): its first call's ``id``, or, for a call without one, the round's
    position and the call's function as text."""
    keys: list[str] = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        calls = m.get("tool_calls")
        if not calls:
            continue
        first = calls[0] if isinstance(calls, Sequence) else None
        call_id = first.get("id") if isinstance(first, Mapping) else None
        if isinstance(call_id, str) and call_id:
            keys.append(call_id)
        else:
            fn = first.get("function") if isinstance(first, Mapping) else None
            keys.append(f"#{i}:{fn!r}")
    return keys


class SessionRounds:
    """The tool rounds each conversation has had, by session id (an LRU).

    Args:
        max_sessions: conversations remembered (0 remembers none: every count is the
            visible one).
        max_rounds: round ids kept per conversation; past that, its count stops growing
            from memory (the visible count still applies).

    Raises:
        ConfigError: a limit that is no int, or below 0 (``max_sessions``) or 1
            (``max_rounds``) (a ``ValueError`` too).
    """

    __slots__ = ("_sessions", "max_rounds", "max_sessions")

    def __init__(self, max_sessions: int = 10_000, *, max_rounds: int = 1024) -> None:
        check_count(max_sessions, "max_sessions", 0)
        check_count(max_rounds, "max_rounds")
        self.max_sessions = max_sessions
        self.max_rounds = max_rounds
        self._sessions: OrderedDict[str, set[str]] = OrderedDict()

    def rounds(self, session_id: str | None, messages: Sequence[Mapping[str, Any]]) -> int:
        """The tool rounds of the conversation so far, this request's messages included.

        Args:
            session_id: the conversation's id (the ``X-Session-ID`` header), or ``None``.
            messages: the request's messages.
        """
        visible = round_keys(messages)
        if session_id is None or self.max_sessions == 0:
            return len(visible)
        key = session_id if len(session_id) <= _MAX_KEY_CHARS else _digest(session_id)
        seen = self._sessions.get(key)
        if seen is None:
            seen = self._sessions[key] = set()
            if len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(key)
        for k in visible:
            if len(seen) >= self.max_rounds:
                break
            seen.add(k)
        return max(len(seen), len(visible))

    def forget(self, session_id: str) -> bool:
        """Drop one conversation's memory; whether it was remembered."""
        key = session_id if len(session_id) <= _MAX_KEY_CHARS else _digest(session_id)
        return self._sessions.pop(key, None) is not None

    def __len__(self) -> int:
        """Conversations remembered now."""
        return len(self._sessions)


def _digest(session_id: str) -> str:
    return hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
