"""Prefix warm-up: the tickets parked behind a prefix's leader, per replica.

**Prefix warm-up is per replica.** A prefix is warm on the replica its leader's
prefill ran on, not on the others (each server has its own KV cache). A ticket is
placed first, then parked if its prefix is warming *on that replica*; one placed on a
replica where its prefix is cold becomes that replica's leader. So when the replica
the prefix warmed on is full, the overflow does not all go cold to the next one at
once: one leads there, the rest park again until it has its first token — a ticket
placed on a replica where its prefix is cold parks behind a leader warming it on
another, so a prefix has one warm-up under way at a time beyond where it is warm. A ticket
that would park goes instead to a replica where its prefix is warm, if one has room
(:meth:`PrefixWarmups._go`), and a slot freeing on such a replica re-offers the first
ticket parked behind a leader elsewhere (:meth:`PrefixWarmups._reoffer`). Parked tickets
are kept by prefix *and* replica: a leader's first token releases only its own. Where a
prefix is warm is kept for the most recently used ones only (:mod:`._warmth`).

:class:`PrefixWarmups` is the base class of the dispatcher (:mod:`._dispatch`), whose
heap the released tickets go back to.
"""

from __future__ import annotations

import asyncio
import heapq

from agentflow._logging import get_logger
from agentflow.sched._replica import ReplicaState
from agentflow.sched._router import Router
from agentflow.sched._ticket import Grant, Ticket, Waiter
from agentflow.sched._warmth import WARM, WARMING, WarmKey, Warmth
from agentflow.typing import Clock

__all__ = ["AVOID_S", "WARM", "WARMING", "WARMUP_TIMEOUT_S", "Entry", "PrefixWarmups"]

_log = get_logger("agentflow.sched")

#: How long the tickets parked behind a prefix's leader wait for its first token before
#: they go anyway (seconds; :class:`~agentflow.sched.Scheduler`'s ``warmup_timeout_s``).
WARMUP_TIMEOUT_S = 20.0
#: How long, after the stream of a prefix's leader that failed on a replica (or had no
#: first token within the warm-up timeout) ended, that prefix's tickets still go elsewhere
#: while another replica has room (seconds; :meth:`ReplicaState.avoids`).
AVOID_S = 60.0
#: A timed-out leader's replica is avoided at least until its stream ends.
_UNTIL_IT_ENDS = 1 << 62
#: A queued ticket: its rank, its arrival order (ties), the ticket and who waits for it.
Entry = tuple[float, int, Ticket, Waiter]


class PrefixWarmups:
    """Where each prefix is warm or warming, its leaders, and the tickets parked behind
    them (the dispatcher's base class)."""

    replicas: list[ReplicaState]
    prefix_warmup: bool
    warmup_timeout_s: float | None
    router: Router
    _clock: Clock
    _heap: list[Entry]

    def __init__(self) -> None:
        self._warm = Warmth()  # (the most recently used, and the live sessions')
        # The leaders' timers: when one fires, its prefix stops waiting on that replica.
        self._warm_timers: dict[WarmKey, asyncio.TimerHandle] = {}
        # The grant leading each warm-up in progress: a stale leader (timed out, then a
        # new one started) ending must not end its successor's warm-up.
        self._leaders: dict[WarmKey, Grant] = {}
        # The tickets parked behind each warming prefix's leader, by prefix and replica.
        self._parked: dict[WarmKey, list[Entry]] = {}

    def _kick(self) -> None:
        """Wake the dispatcher: tickets went back on its heap (the dispatcher's)."""
        raise NotImplementedError

    def _behind(self, ticket: Ticket, replica: ReplicaState) -> ReplicaState | None:
        """The replica whose prefix leader ``ticket``, placed on ``replica``, waits for:
        ``replica`` if its prefix is warming there; if it is cold there (``ticket`` would
        lead there), another replica it is warming on — so a prefix has one warm-up at a
        time beyond the replicas it is warm on, not one per cold replica the overflow is
        placed on; else ``None`` (it goes)."""
        key = ticket.prefix_key
        if not self.prefix_warmup or key is None:
            return None
        state = self._warm.get((key, replica.name))
        if state is not None:
            return replica if state == WARMING else None
        if len(self.replicas) > 1:  # (only a leading ticket pays for the scan)
            for r in self.replicas:
                # Not behind one that shares only at its end (llama.cpp): that wait is a
                # whole generation, for a prefix this replica would not get anyway.
                if (
                    self._warm.get((key, r.name)) == WARMING
                    and not r.shares_at_end
                    and r.name not in ticket.exclude
                ):
                    return r
        return None

    def _go(self, ticket: Ticket, replica: ReplicaState) -> ReplicaState | None:
        """Where ``ticket``, placed on ``replica``, goes now: there, or, when it would park
        behind its prefix's leader (:meth:`_behind`), a replica where its prefix is warm
        and that has room (the router's choice may be a cold one: the warm one was full,
        or past ``balance_slack``, or at its llama.cpp slots, when the prefix's affinity
        moved; nor does this choose one at its slots: :meth:`Router.saturated`), else
        ``None`` (it parks)."""
        if self._behind(ticket, replica) is None:
            return replica
        key = ticket.prefix_key
        for r in self.replicas:
            if (
                self._warm.get((key or "", r.name)) == WARM
                and r.name not in ticket.exclude
                and r.breaker.allows()
                and not r.held_ns()
                and r.has_room(ticket)
                and not self.router.saturated(r)
            ):
                return r
        return None

    def _park(self, entry: Entry, replica: ReplicaState) -> None:
        """Park ``entry``, placed on ``replica``, behind its prefix's leader there, or,
        its prefix cold there, behind the one warming it elsewhere."""
        behind = self._behind(entry[2], replica) or replica
        self._parked.setdefault((entry[2].prefix_key or "", behind.name), []).append(entry)

    def _reoffer(self, replica: ReplicaState) -> None:
        """A slot freed on ``replica``: of the tickets parked behind a leader elsewhere
        whose prefix is warm on ``replica``, the first is placed again (it may go there
        now: :meth:`_go`); one a slot, so a busy replica does not re-place them all at
        each release."""
        name, warm = replica.name, self._warm
        best: Entry | None = None
        best_key: WarmKey | None = None
        for warm_key, parked in self._parked.items():
            if warm.get((warm_key[0], name)) == WARM:
                # (rank, seq): seq is unique, tickets never compared; one whose acquire
                # was cancelled while parked is no offer (the pump would only drop it)
                live = [e for e in parked if not e[3].done()]
                first = min(live) if live else None
                if first is not None and (best is None or first < best):
                    best, best_key = first, warm_key
        if best is None or best_key is None:
            return
        parked = self._parked[best_key]
        parked.remove(best)
        if not parked:
            del self._parked[best_key]
        self._unpark([best])

    def _leads(self, ticket: Ticket, replica: ReplicaState) -> bool:
        """``ticket`` starts on ``replica``: whether it is its prefix's leader there (the
        prefix is cold on that replica: the tickets placed there next park)."""
        key = ticket.prefix_key
        if not self.prefix_warmup or key is None:
            return False
        self._warm.live_session(ticket.session_id, key)
        if self._warm.used((key, replica.name)):
            return False
        self._warm[key, replica.name] = WARMING
        if self.warmup_timeout_s is not None:
            self._warm_timers[key, replica.name] = asyncio.get_running_loop().call_later(
                self.warmup_timeout_s, self._warm_timed_out, key, replica
            )
        return True

    def leader_token(
        self, prefix_key: str, replica: ReplicaState, grant: Grant | None = None
    ) -> None:
        """The prefix's leader on ``replica`` (``grant``, when known) has its first
        token: the prefix is warm there — or, on a replica that shares a prefix only once
        its request ended (``Replica.prefix_shared_at="end"``: llama.cpp), it is alive,
        and its followers wait for its end while it streams: the warm-up timeout starts
        again, now bounding the leader's silence (:meth:`_leader_quiet`). A stale
        leader's (one that timed out, a new one leading since) leaves its successor's
        timer alone."""
        if replica.shares_at_end:
            warm_key = (prefix_key, replica.name)
            leader = self._leaders.get(warm_key)
            if leader is None or (grant is not None and leader is not grant):
                return
            timer = self._warm_timers.pop(warm_key, None)
            if timer is not None:
                timer.cancel()
                self._arm_quiet(prefix_key, replica, leader.deltas)
            return
        self.warmed(prefix_key, replica)

    def _arm_quiet(self, prefix_key: str, replica: ReplicaState, seen: int) -> None:
        """Check the streaming leader on ``replica`` for progress past ``seen`` deltas
        in ``warmup_timeout_s``."""
        assert self.warmup_timeout_s is not None  # (armed only with a timeout)
        self._warm_timers[prefix_key, replica.name] = asyncio.get_running_loop().call_later(
            self.warmup_timeout_s, self._leader_quiet, prefix_key, replica, seen
        )

    def _leader_quiet(self, prefix_key: str, replica: ReplicaState, seen: int) -> None:
        """``warmup_timeout_s`` after the first token of a leader on a replica that
        shares at the end, or after its last check: a leader that had a delta since
        (more than ``seen``) is checked again a timeout later; one that had none stalled,
        and its followers go without it as at :meth:`_warm_timed_out` — it used to hold
        them for its whole idle timeout (300 s by default) while other replicas sat idle.
        So a leader silent for between one and two timeouts releases them, at the cost of
        one timer a timeout, not one per token."""
        warm_key = (prefix_key, replica.name)
        leader = self._leaders.get(warm_key)
        if leader is not None and leader.deltas != seen and self._warm.get(warm_key) == WARMING:
            self._arm_quiet(prefix_key, replica, leader.deltas)
            return
        self._warm_timed_out(prefix_key, replica)

    def warmed(self, prefix_key: str, replica: ReplicaState) -> None:
        """The prefix's leader on ``replica`` has its first token (its prefill is done,
        the prefix is in that server's cache), or it ended: release the tickets parked
        behind it. They are placed again: those placed where the prefix is warming still
        park, and one placed where it is cold leads there."""
        warm_key = (prefix_key, replica.name)
        self._leaders.pop(warm_key, None)
        if self._warm.get(warm_key) == WARM:
            return
        self._warm[warm_key] = WARM
        replica.avoid_until.pop(prefix_key, None)
        timer = self._warm_timers.pop(warm_key, None)
        if timer is not None:
            timer.cancel()
        self._unpark(self._parked.pop(warm_key, None))

    def _warm_timed_out(self, prefix_key: str, replica: ReplicaState) -> None:
        """The leader on ``replica`` had no first token within ``warmup_timeout_s`` (or,
        on a replica that shares at the end, no delta for as long: :meth:`_leader_quiet`):
        its followers go without it — elsewhere while another replica has room (a replica
        that went silent would otherwise hold them for its idle timeout, then draw them
        back): the prefix is cold there again, not warm, its affinity stops pointing
        there, and its tickets avoid it until the leader's stream ends, and
        :data:`AVOID_S` after, unless the leader warms it meanwhile."""
        self._warm_timers.pop((prefix_key, replica.name), None)
        if self._warm.get((prefix_key, replica.name)) != WARMING:
            return
        _log.warning(
            "warmup.timeout",
            replica=replica.name,
            prefix_key=prefix_key,
            timeout_s=self.warmup_timeout_s,
        )
        self.router.unpin(prefix_key, replica)
        self._avoid(prefix_key, replica, _UNTIL_IT_ENDS)
        self._cool(prefix_key, replica)

    def _leader_ended(self, grant: Grant, prefix_key: str, ok: bool | None) -> None:
        """The stream of ``grant``, its prefix's leader on its replica, ended: ``ok`` as
        :meth:`Scheduler.release`'s, but ``None`` for one rejected (a 429, another 4xx)
        before its first token — it prefilled nothing, and releasing its followers all at
        once as if the prefix were warm had each prefill it from scratch, none leading
        anew. Answered, the prefix is warm there. Ended before its
        first token unanswered (failed, cancelled, rejected), the prefix is cold there again: the
        tickets parked behind it are placed again, and at most one leads there anew. A
        failure that blames the replica also stops the prefix's affinity pointing there,
        and its tickets avoid it for :data:`AVOID_S`; so do a timed-out leader's when it
        ends unanswered. A timed-out leader no longer leads the warm-up there: if a new
        leader started there meanwhile, its ending unanswered leaves that one's warm-up
        (and the tickets parked behind it) alone."""
        replica = grant.replica
        if ok:
            self.warmed(prefix_key, replica)
            return
        warm_key = (prefix_key, replica.name)
        warming = self._leaders.get(warm_key) is grant and self._warm.get(warm_key) == WARMING
        if ok is False:
            self.router.unpin(prefix_key, replica)
        if (ok is False and warming) or replica.avoid_until.get(prefix_key) == _UNTIL_IT_ENDS:
            self._avoid(prefix_key, replica, self._clock() + int(AVOID_S * 1e9))
        if warming:  # (cancelled too: its prefill may not have run)
            self._cool(prefix_key, replica)

    def _avoid(self, prefix_key: str, replica: ReplicaState, until_ns: int) -> None:
        replica.avoid_until[prefix_key] = until_ns
        self.router.avoided.add(prefix_key)

    def _cool(self, prefix_key: str, replica: ReplicaState) -> None:
        """The prefix's warm-up on ``replica`` ended without its first token: the prefix
        is cold there again, and the tickets parked behind it are placed again."""
        warm_key = (prefix_key, replica.name)
        timer = self._warm_timers.pop(warm_key, None)
        if timer is not None:
            timer.cancel()
        self._leaders.pop(warm_key, None)
        if self._warm.get(warm_key) == WARMING:
            del self._warm[warm_key]
        self._unpark(self._parked.pop(warm_key, None))

    def _unpark(self, parked: list[Entry] | None) -> None:
        if parked:
            for entry in parked:
                heapq.heappush(self._heap, entry)
            self._kick()

    def _cancel_warm_timers(self) -> None:
        for timer in self._warm_timers.values():
            timer.cancel()
        self._warm_timers.clear()
        self._leaders.clear()
