"""Scheduling: which ready turn goes next, where it goes, and what happens when a server says no.

The pieces, in the order a turn meets them::

    Ticket (_ticket.py)      a ready turn: estimated tokens, priority, prefix, service so far
      → Policy (_policy.py)  ranks it once: FCFS, FairShare, PLAS, Priority, Deadline
      → Scheduler (_scheduler.py)   one heap, one dispatcher task; fleet Limits (_limits.py)
      → Router (_router.py)  sticky → prefix-affine → least-loaded Replica (_replica.py),
                             skipping replicas whose CircuitBreaker (_breaker.py) is open
      → Grant (_ticket.py)   the replica and a slot on it, for the ticket's Waiter
      → TurnRunner (_runner.py)     stream on the replica; RetryPolicy (_retry.py) on failure
"""

from agentflow._public import publish as _publish
from agentflow.sched._breaker import CircuitBreaker, CircuitState
from agentflow.sched._limits import Limits, RateGate
from agentflow.sched._policy import (
    FCFS,
    PLAS,
    Deadline,
    FairShare,
    Policy,
    Priority,
    policy_by_name,
)
from agentflow.sched._replica import Replica, ReplicaState
from agentflow.sched._retry import RetryPolicy
from agentflow.sched._router import Router
from agentflow.sched._runner import FailedAttempt, TurnRunner
from agentflow.sched._scheduler import Scheduler
from agentflow.sched._ticket import Grant, SchedulerState, Ticket, Waiter

__all__ = [
    "FCFS",
    "PLAS",
    "CircuitBreaker",
    "CircuitState",
    "Deadline",
    "FailedAttempt",
    "FairShare",
    "Grant",
    "Limits",
    "Policy",
    "Priority",
    "RateGate",
    "Replica",
    "ReplicaState",
    "RetryPolicy",
    "Router",
    "Scheduler",
    "SchedulerState",
    "Ticket",
    "TurnRunner",
    "Waiter",
    "policy_by_name",
]

# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
