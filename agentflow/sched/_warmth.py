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
timer and parked tickets depend on it.
"""

from __future__ import annotations

from collections import OrderedDict
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

    def __setitem__(self, key: WarmKey, state: int) -> None:
        super().__setitem__(key, state)
        self.move_to_end(key)
        if state == WARM and len(self) > self.kept:
            self._drop_coldest(len(self) - self.kept, key)

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
        """Forget the ``n`` least recently used warm entries (never one warming, nor
        ``new``, just warm)."""
        old = (k for k, state in self.items() if state == WARM and k != new)
        coldest = list(islice(old, n))
        for key in coldest:
            del self[key]
