"""The router: which replica a dispatched turn goes to.

In order of preference, among replicas that are healthy (breaker closed, or a probe
is due), not held by a ``Retry-After``, have room, and are not excluded for this attempt:

1. **sticky** — the replica the session's earlier turns went to: it holds the
   session's KV, so only the newest tokens need a prefill;
2. **prefix-affine** — for a session's first turn, the replica its shared prefix
   (system prompt + tools) was last sent to, while that replica is not more than
   ``balance_slack`` requests busier than the least-loaded one, and, busier than it, has
   fewer requests in flight than its llama.cpp server has slots (as a fleet's run learnt
   them from ``/props``: :meth:`Router.saturated`);
3. **least loaded** — fewest requests in flight, then fewest tokens in flight.

Among those with room (after stickiness), one whose rate buckets take the turn's whole
charge is preferred to one that would be overdrawn by it (a charge bigger than its
bucket). A session whose sticky replica is full moves to one with room (work-conserving: an
idle replica is never left idle while turns wait) and sticks there. Excluding a
replica (failover after an error) is a preference among the replicas with room: if every
one with room is excluded, an excluded one is used rather than waiting for another to
have room. A replica's hold after it answered with a ``Retry-After`` (with failover on)
is a preference among the healthy replicas: it gets nothing until then while another
healthy replica exists, even a full one (the server asked for the quiet; the dispatcher
wakes when the hold ends). A replica that failed a prefix's warm-up leader, or kept it past
the warm-up timeout, is a preference the same way for that prefix's tickets
(:meth:`ReplicaState.avoids`): they go to another with room while there is one.

The prefix affinity is remembered for the :data:`PREFIXES_KEPT` prefixes most recently
sent (least recently sent forgotten first: its next new session goes least loaded): a
fleet with one prefix per session, run again and again, or streaming without end, would
otherwise keep one entry per session ever started. A run's replica states are its own: an
affinity pointing at an earlier run's is never chosen (it is not among the replicas with
room), is drawn anew by the prefix's next placement, or goes as the most recently sent
push it out — not all at once as a new run starts, which would have two fleets sharing a
router at once drop each other's affinities at every turn.
"""

from __future__ import annotations

from collections import OrderedDict
from urllib.parse import quote

from agentflow._counts import check_count, check_flag
from agentflow._errors import ConfigError
from agentflow._session_checks import is_header_name
from agentflow.sched._replica import ReplicaState
from agentflow.sched._ticket import Ticket

__all__ = ["PREFIXES_KEPT", "Router"]

#: How many prefixes' affinities a router keeps (the most recently sent; ~100 B each).
PREFIXES_KEPT = 4096

#: What a session key keeps as it is in the header: printable ASCII and the tab, but ``%``.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != ord("%")) + "\t"


class Router:
    """Chooses a replica per dispatched turn and keeps sessions where their KV is.

    Args:
        sticky: keep each session on the replica of its earlier turns.
        prefix_affinity: place new sessions with the others that share their prefix.
        balance_slack: how many more requests in flight a prefix's replica may have than
            the least-loaded one before new sessions of that prefix go elsewhere.
        session_header: the header that carries the session key to servers and gateways
            that route by it (``None`` sends none). A session id that is not ASCII goes
            percent-encoded (its UTF-8, and any ``%`` in it), the same on every
            transport; an ASCII one goes as it is.
        prompt_cache_key: also send the prefix key as OpenAI's ``prompt_cache_key`` body field.
    """

    def __init__(
        self,
        *,
        sticky: bool = True,
        prefix_affinity: bool = True,
        balance_slack: int = 4,
        session_header: str | None = "X-Session-ID",
        prompt_cache_key: bool = False,
    ) -> None:
        check_count(balance_slack, "Router.balance_slack", 0)
        check_flag(sticky, "Router.sticky")
        check_flag(prefix_affinity, "Router.prefix_affinity")
        check_flag(prompt_cache_key, "Router.prompt_cache_key")
        if session_header is not None and not is_header_name(session_header):
            raise ConfigError(
                "Router.session_header must be a header name (letters, digits and "
                f"!#$%&'*+-.^_`|~) or None, got {session_header!r}"
            )
        self.sticky = sticky
        self.prefix_affinity = prefix_affinity
        self.balance_slack = balance_slack
        self.session_header = session_header
        self.prompt_cache_key = prompt_cache_key
        self._session: dict[str, ReplicaState] = {}
        # Least recently sent first; at most ``_prefixes_kept``.
        self._prefix: OrderedDict[str, ReplicaState] = OrderedDict()
        self._prefixes_kept = PREFIXES_KEPT
        #: Prefixes some replica avoids, or did (:meth:`ReplicaState.avoids`; the
        #: scheduler adds them): only their tickets pay for the check.
        self.avoided: set[str] = set()
        #: Turns that went to their sticky replica, and sessions that had to move.
        self.sticky_hits = 0
        self.moves = 0

    def choose(self, ticket: Ticket, replicas: list[ReplicaState]) -> ReplicaState | None:
        """The replica for ``ticket``, or ``None`` when none can take it now."""
        if len(replicas) == 1:  # the common case: no choice to make
            only = replicas[0]
            return only if only.breaker.allows() and only.has_room(ticket) else None
        if self.sticky and not ticket.exclude:  # the common case: back to its home replica
            home = self._session.get(ticket.session_id)
            if (
                home is not None
                and home.breaker.allows()
                and not home.held_ns()
                and home.has_room(ticket)
            ):
                self.sticky_hits += 1
                return home
        healthy = [r for r in replicas if r.breaker.allows()]
        free = [r for r in healthy if not r.held_ns()]
        healthy = free or healthy
        room = [r for r in healthy if r.has_room(ticket)]
        if not room:
            return None
        if ticket.exclude:  # among those with room: never a reason to wait
            preferred = [r for r in room if r.name not in ticket.exclude]
            room = preferred or room
        key = ticket.prefix_key
        if key is not None and key in self.avoided:  # a leader of its prefix failed there
            preferred = [r for r in room if not r.avoids(key)]
            room = preferred or room
        whole = [r for r in room if r.takes_whole(ticket)]  # no bucket overdrawn
        room = whole or room
        if self.sticky:
            home = self._session.get(ticket.session_id)
            if home is not None and home in room:
                self.sticky_hits += 1
                return home
        least = min(room, key=_load)
        if self.prefix_affinity and ticket.prefix_key is not None:
            group = self._prefix.get(ticket.prefix_key)
            if (
                group is not None
                and group in room
                and group.in_flight <= least.in_flight + self.balance_slack
                and (group.in_flight <= least.in_flight or not self.saturated(group))
            ):
                return group
        return least

    @staticmethod
    def saturated(replica: ReplicaState) -> bool:
        """Whether ``replica`` has as many requests in flight as the llama.cpp server
        behind it has slots — more would wait in the server's queue. Known once a fleet's
        run has asked the endpoint's ``/props`` (in the background, so not for the
        requests sent before it answered; not in a ``Fleet(workers=N)`` worker); else, and
        for servers that are not llama.cpp, ``False``. The default ``balance_slack`` (4)
        used to keep a whole fleet on a 2-slot replica while another sat idle. (A replica's
        ``Limits(max_in_flight=...)`` needs no such check: at it, it has no room.)"""
        base_url = getattr(getattr(replica.transport, "config", None), "base_url", None)
        if not isinstance(base_url, str):
            return False
        from agentflow.llamacpp import _learned_slots  # (imported by the run's probe)

        slots = _learned_slots(base_url)
        return slots is not None and replica.in_flight >= slots

    def affinity(self, prefix_key: str) -> ReplicaState | None:
        """The replica ``prefix_key``'s new sessions are drawn to (``None``: none)."""
        return self._prefix.get(prefix_key)

    def pin(self, prefix_key: str, replica: ReplicaState) -> None:
        """Draw ``prefix_key``'s new sessions to ``replica`` (the scheduler keeps a
        prefix's affinity on a replica it is warm on when it leads a warm-up elsewhere)."""
        self._draw(prefix_key, replica)

    def placed(self, ticket: Ticket, replica: ReplicaState) -> None:
        """``ticket`` was dispatched to ``replica``: remember it for stickiness."""
        if ticket.prefix_key is not None:
            self._draw(ticket.prefix_key, replica)
        if not self.sticky:
            return
        home = self._session.get(ticket.session_id)
        if home is not replica:
            if home is not None:
                home.sessions -= 1
                self.moves += 1
            replica.sessions += 1
            self._session[ticket.session_id] = replica

    def _draw(self, prefix_key: str, replica: ReplicaState) -> None:
        """Point ``prefix_key``'s affinity at ``replica``: the most recent; past
        ``_prefixes_kept`` the least recently sent prefix is forgotten."""
        prefixes = self._prefix
        prefixes[prefix_key] = replica
        prefixes.move_to_end(prefix_key)
        if len(prefixes) > self._prefixes_kept:
            prefixes.popitem(last=False)

    def unpin(self, prefix_key: str, replica: ReplicaState) -> None:
        """``replica`` failed the prefix's leader (or kept it waiting past the warm-up
        timeout): new sessions of that prefix are no longer drawn to it."""
        if self._prefix.get(prefix_key) is replica:
            del self._prefix[prefix_key]

    def restore(self, session_id: str, replica: ReplicaState) -> None:
        """A resumed session's earlier turns went to ``replica``: its next turn goes back
        there while the replica has room (its prefix may still be in that server's cache)."""
        if self.sticky and session_id not in self._session:
            replica.sessions += 1
            self._session[session_id] = replica

    def forget(self, session_id: str) -> None:
        """The session ended; its replica no longer holds it."""
        home = self._session.pop(session_id, None)
        if home is not None:
            home.sessions -= 1

    def headers(self, ticket: Ticket) -> dict[str, str]:
        """Headers that carry the session key for this turn."""
        if not self.session_header:
            return {}
        key = ticket.session_id
        if not key.isascii():
            # Raw UTF-8 went out through aiohttp, while the OpenAI SDK's httpx refused it
            # (a bare UnicodeEncodeError at every turn): percent-encoded, it is ASCII on
            # every transport, and one session's key is the same whichever sends it.
            key = quote(key, safe=_HEADER_SAFE)
        return {self.session_header: key}


def _load(r: ReplicaState) -> tuple[int, int, int]:
    return (r.in_flight, r.tokens_in_flight, r.sessions)
