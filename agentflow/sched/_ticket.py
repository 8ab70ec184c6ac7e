"""A :class:`Ticket`: one model turn waiting to be dispatched, and what policies see."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SchedulerState", "Ticket"]


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
    """

    now_ns: int = 0
    last_key: float = 0.0
    attained_ns: dict[str, int] = field(default_factory=dict)
    dispatched: dict[str, int] = field(default_factory=dict)
