"""Where each prefix is warm, or warming: the dispatcher's record, bounded.

A prefix is warm on a replica once its leader there had its first token (the prefix is
in that server's cache), and warming while that leader's request is out. The record of
a warm prefix outlives the sessions that sent it — keeping the next ones from parking
behind a new leader is its point — so a run of many prefixes (a fleet with one per
session, streaming without end) would keep one entry per prefix and replica ever sent.
:class:`Warmth` keeps the :data:`WARM_KEPT` most recently used warm entries: the least
recently used goes first, and its prefix's next ticket on that replica leads a warm-up
again (the tickets placed there meanwhile wait for its first token, quick if the
server still has the prefix cached). A warm-up under way is never dropped: its leader,
timer and parked tickets depend on it; nor the entry of a prefix some live session sends
(the dispatcher counts them): with more such sessions than the bound, each of its own
prefix, every entry went before its session's next turn, and every turn led a warm-up
again (past the warm-up timeout, a warning and an avoided replica each time). So the
record holds the live sessions' prefixes, and the bound's worth of those that ended.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from itertools import islice

__all__ = ["WARM", "WARMING", "WARM_KEPT", "WarmKey", "Warmth"]

#: A prefix's warm-up on a replica: its first request there is out (others placed there
#: park), or it has its first token.
WARMING, WARM = 1, 2
#: Whose warm-up: a prefix key and the name of the replica it warms on.
WarmKey = tuple[str, str]
#: How many (prefix, replica) pairs a scheduler remembers as warm (~200 B each).
WARM_KEPT = 4096


class Warmth(OrderedDict[WarmKey, int]):
    """:data:`WARMING` or :data:`WARM` by (prefix, replica), least recently used first:
    at most ``kept`` entries (default :data:`WARM_KEPT`), or more while more warm-ups
    than that are under way."""

    def __init__(self, kept: int | None = None) -> None:
        super().__init__()
        self.kept = WARM_KEPT if kept is None else kept
        #: The prefix keys live sessions send, and how many send each: never dropped.
        self.live: Counter[str] = Counter()
        self._sessions: dict[str, str] = {}  # live session id -> its prefix key
        self._entries: Counter[str] = Counter()  # prefix key -> its entries (replicas)
        self._live_entries = 0  # entries of live prefixes: beyond the bound

    def live_session(self, session_id: str, prefix_key: str) -> None:
        """``session_id`` (sending ``prefix_key``) is live until :meth:`forget_session`."""
        if session_id not in self._sessions:
            self._sessions[session_id] = prefix_key
            self.live[prefix_key] += 1
            if self.live[prefix_key] == 1:
                self._live_entries += self._entries.get(prefix_key, 0)

    def forget_session(self, session_id: str) -> None:
        """The session ended: its prefix is live no more on its account."""
        key = self._sessions.pop(session_id, None)
        if key is not None:
            left = self.live[key] - 1
            if left:
                self.live[key] = left
            else:
                del self.live[key]
                self._live_entries -= self._entries.get(key, 0)

    def __setitem__(self, key: WarmKey, state: int) -> None:
        if key not in self:
            self._entries[key[0]] += 1
            if key[0] in self.live:
                self._live_entries += 1
        super().__setitem__(key, state)
        self.move_to_end(key)
        over = len(self) - self._live_entries - self.kept  # the bound: the others
        if state == WARM and over > 0:
            self._drop_coldest(over, key)

    def __delitem__(self, key: WarmKey) -> None:
        super().__delitem__(key)
        left = self._entries[key[0]] - 1
        if left:
            self._entries[key[0]] = left
        else:
            del self._entries[key[0]]
        if key[0] in self.live:
            self._live_entries -= 1

    def used(self, key: WarmKey) -> bool:
        """Whether ``key`` is warm or warming (a ticket starts there): it becomes the
        most recently used."""
        if key not in self:
            return False
        self.move_to_end(key)
        return True

    def drop_warming(self) -> None:
        """Forget the warm-ups under way (their leaders' records are lost)."""
        for key in [k for k, state in self.items() if state == WARMING]:
            del self[key]

    def _drop_coldest(self, n: int, new: WarmKey) -> None:
        """Forget the ``n`` least recently used warm entries (never one warming, one a
        live session sends, nor ``new``, just warm)."""
        live = self.live
        old = (k for k, state in self.items() if state == WARM and k != new and k[0] not in live)
        coldest = list(islice(old, n))
        for key in coldest:
            del self[key]
