"""What a turn is to the scheduler: the :class:`Ticket` it waits as, what policies see
when they rank it, the :class:`Grant` it gets, and the :class:`Waiter` that gets it.

These are the types that cross the scheduler's boundary (sessions, the runner and the
fleet hold them); how the scheduler orders and grants tickets is ``_scheduler.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentflow.sched._replica import ReplicaState

__all__ = ["Grant", "SchedulerState", "Ticket", "Waiter"]


@dataclass(slots=True, eq=False, kw_only=True)
class Ticket:
    """One ready model turn, as the scheduler sees it.

    Attributes:
        session_id: the session the turn belongs to.
        agent: the agent's name.
        turn: the turn's number in its session.
        ready_ns: when the turn became ready (clock of the fleet).
        prompt_tokens: the estimated prompt tokens (calibrated when a context policy runs).
        max_output_tokens: the most output tokens the request may produce.
        priority: the agent's scheduling class; higher goes first under :class:`Priority`.
        deadline_ns: when the turn should have started, for deadline-aware policies.
        prefix_key: identifies the shared prompt prefix (system prompt + tools).
        attained_ns: model time the session has received so far (set by the scheduler).
        attempt: 0 for the first try; retries count up.
        exclude: endpoint names this attempt must avoid (failover).
        seq: arrival order, fleet-wide (set by the scheduler).
        sent: attempts handed to a transport so far (set by the runner); an error
            raised while the turn waits for a slot leaves it as it was.
    """

    session_id: str
    agent: str
    turn: int
    ready_ns: int
    prompt_tokens: int
    max_output_tokens: int
    priority: int = 0
    deadline_ns: int | None = None
    prefix_key: str | None = None
    attained_ns: int = 0
    attempt: int = 0
    exclude: frozenset[str] = frozenset()
    seq: int = 0
    sent: int = 0

    @property
    def tokens(self) -> int:
        """The weight of the request for token limits: prompt + maximum output."""
        return self.prompt_tokens + self.max_output_tokens


@dataclass(slots=True)
class SchedulerState:
    """What a policy may read when it ranks a ticket.

    Attributes:
        now_ns: the fleet clock when the ticket was queued.
        last_key: the rank of the most recently dispatched ticket (a virtual time).
        attained_ns: model time received so far, per session.
        dispatched: turns dispatched so far, per agent.
        fair_finish: per agent, the rank its next turn starts from under
            :class:`~agentflow.sched.FairShare` (its virtual time).

    Each run's scheduler has its own, so what a shipped policy keeps about a run lives
    here, never on the policy (a fleet hands the same policy to every run).
    """

    now_ns: int = 0
    last_key: float = 0.0
    attained_ns: dict[str, int] = field(default_factory=dict)
    dispatched: dict[str, int] = field(default_factory=dict)
    fair_finish: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class Grant:
    """Permission to send one turn: where, and since when.

    Attributes:
        ticket: the turn.
        replica: where it goes.
        started_ns: when it was granted, after any wait on a rate bucket (the session's
            service, which PLAS counts and ``give_up_after_s`` runs from, starts then).
        leader: whether it is the first request of a cold shared prefix (the others
            sharing it wait for its first token).
        probe: whether it is the replica's circuit-breaker probe (only the probe's
            outcome closes or re-opens an open circuit).
        deltas: a leader's stream deltas so far (the runner counts them on a leader's
            stream only): one that had none when it was answered with a 429 or another
            4xx prefilled nothing, and does not warm its prefix; on a replica that shares
            a prefix at the end, the warm-up timeout reads it for the leader's progress.
    """

    ticket: Ticket
    replica: ReplicaState
    started_ns: int
    leader: bool = False
    probe: bool = False
    deltas: int = 0


class Waiter(Protocol):
    """What waits for a queued ticket's grant: the future :meth:`Scheduler.acquire`
    awaits, or what :meth:`Scheduler.offer` was given (a fleet's queued session,
    which starts its task only when granted). ``done`` once it has an outcome or no
    longer wants one."""

    def done(self) -> bool:
        """Whether it was granted, failed or cancelled (a queued one is then skipped)."""

    def cancel(self) -> bool:
        """It will not be granted (the scheduler is closing)."""

    def set_result(self, grant: Grant, /) -> None:
        """Granted: the receiver must :meth:`Scheduler.release` it."""

    def set_exception(self, exc: BaseException, /) -> None:
        """The dispatcher failed: the ticket will never be granted."""
