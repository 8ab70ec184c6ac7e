"""Scheduling policies: which ready turn goes next.

A policy is a small callable that ranks a :class:`Ticket` once, when it is queued:
``policy(ticket, state) -> float``, lower first (ties by arrival). Every shipped
policy returns a *virtual arrival time* in nanoseconds — the ticket's real arrival
shifted by what the policy cares about (service received, priority, deadline), or, for
FairShare, its agent's virtual time. Two things follow:

- The scheduler keeps a heap, so a dispatch costs O(log n) with 10,000 sessions
  waiting, instead of a scan over every ready turn.
- Every shipped policy is starvation-free: a waiting ticket's rank never changes, and
  every new arrival's rank is at least its own arrival time, so a ticket ranked ``k``
  is passed only by tickets that arrive before ``k``: it waits at most the policy's
  bounded shift (aging). FairShare's ranks are not arrival times, but each agent's
  rise by a quantum per turn from the rank last served, so each agent passes a ticket
  ranked ``k`` a bounded number of times.

Write your own as a function or an object with ``__call__``; it may keep its own state,
which then lasts as long as the object — across every run of a fleet, which hands the same
policy to each (the shipped policies keep none: FairShare's per-run virtual times are on
the run's :class:`SchedulerState`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from agentflow._agent import MAX_PRIORITY
from agentflow._errors import ConfigError
from agentflow.sched._limits import _number
from agentflow.sched._ticket import SchedulerState, Ticket

__all__ = [
    "FCFS",
    "PLAS",
    "Deadline",
    "FairShare",
    "Policy",
    "Priority",
    "policy_by_name",
]

_NS = 1_000_000_000


class Policy(Protocol):
    """Ranks a ticket when it is queued; the lowest rank is dispatched first."""

    def __call__(self, ticket: Ticket, state: SchedulerState, /) -> float:
        """The ticket's rank (a virtual arrival time in ns for the shipped policies)."""


class FCFS:
    """First come, first served: rank = arrival time. What ``gather`` + ``Semaphore`` does."""

    name = "fcfs"

    def __call__(self, ticket: Ticket, state: SchedulerState, /) -> float:
        return float(ticket.ready_ns)


class FairShare:
    """Fair round-robin across agents (start-time fair queuing).

    Each agent's turns are numbered in a virtual time: a turn's rank is ``max(the rank
    last served, the agent's previous rank + quantum)``, so agents with many ready
    sessions take turns with agents that have one. The virtual time is the rank last
    served, never the wall clock: under a backlog the clock runs ahead of the ranks
    being served (each turn takes longer than ``quantum_s``), and a newcomer ranked at
    "now" would wait behind the whole backlog, as under FCFS. An agent that was idle
    does not bank credit (the rank last served moved on without it), and an agent that
    ran alone on spare capacity is not pushed behind the newcomers. The agents' virtual
    times are the run's (:attr:`SchedulerState.fair_finish`): one ``FairShare`` serves
    every run of a fleet, and each run starts with every agent even.

    Args:
        quantum_s: the virtual time one dispatched turn costs its agent.
    """

    name = "fair"

    def __init__(self, quantum_s: float = 0.1) -> None:
        if not (_number(quantum_s) and 0 < quantum_s < math.inf):  # (NaN fails too)
            raise ConfigError(f"FairShare quantum_s must be a finite number > 0, got {quantum_s!r}")
        self._quantum = _ns(quantum_s, "FairShare quantum_s")

    def __call__(self, ticket: Ticket, state: SchedulerState, /) -> float:
        finish = state.fair_finish  # the run's, not the policy's: runs start afresh
        rank = max(state.last_key, finish.get(ticket.agent, 0.0))
        finish[ticket.agent] = rank + self._quantum
        return rank


class PLAS:
    """Program-level least attained service (Autellix): less service so far goes first.

    rank = arrival + ``weight`` × model time the session has received. A session that
    has had 2 s of model time is treated as if its turn arrived ``2 × weight`` s
    later, so short agents are not stuck behind long ones; a long agent's turn is
    passed only by turns that arrive within that shift, never forever.

    Args:
        weight: how many seconds of queueing one second of received service costs.
            ``inf`` is pure PLAS (and can starve); the default ages.
    """

    name = "plas"

    def __init__(self, weight: float = 10.0) -> None:
        if not (_number(weight) and weight > 0):  # (NaN fails too; inf is pure PLAS)
            raise ConfigError(f"PLAS weight must be a number > 0, got {weight!r}")
        self.weight = weight

    def __call__(self, ticket: Ticket, state: SchedulerState, /) -> float:
        if not ticket.attained_ns:  # inf × 0 would be nan, which breaks the heap's order
            return float(ticket.ready_ns)
        return ticket.ready_ns + self.weight * ticket.attained_ns


class Priority:
    """Priority classes with aging: each level is served as if it arrived ``boost_s``
    seconds earlier (a turn of priority ``p`` ranks at its arrival − ``p × boost_s``).

    So a low-class turn is passed only by higher-class turns that arrive within
    ``boost_s`` after it (``d × boost_s`` for a class ``d`` levels higher); one that
    arrives later queues behind it. It is not a bound on the low-class turn's wait:
    under overload (higher-class turns arriving faster than they are served) it waits
    for every turn that passed it, which can take far longer than ``boost_s``.

    Args:
        boost_s: the head start each priority level buys.
    """

    name = "priority"

    def __init__(self, boost_s: float = 30.0) -> None:
        if not (_number(boost_s) and 0 <= boost_s < math.inf):  # (NaN fails; inf: 0 * inf)
            raise ConfigError(f"Priority boost_s must be a finite number ≥ 0, got {boost_s!r}")
        self._boost = _ns(boost_s, "Priority boost_s")
        # The head start of the highest class must be finite too (inf - inf is NaN).
        _ns(boost_s * MAX_PRIORITY, f"Priority boost_s × the largest priority ({MAX_PRIORITY})")

    def __call__(self, ticket: Ticket, state: SchedulerState, /) -> float:
        return ticket.ready_ns - ticket.priority * self._boost


class Deadline:
    """Earliest deadline first, with each turn's deadline = arrival + its agent's SLO.

    A ticket's own ``deadline_ns`` wins when set.

    Args:
        default_slo_s: the target queueing delay of agents not named in ``slo_s``.
        slo_s: per-agent targets, e.g. ``{"chat": 0.5, "batch": 60}``.
    """

    name = "deadline"

    def __init__(self, default_slo_s: float = 10.0, slo_s: Mapping[str, float] | None = None):
        if slo_s is not None and not isinstance(slo_s, Mapping):
            raise ConfigError(f"Deadline slo_s must be a mapping agent → seconds, got {slo_s!r}")
        targets = dict(slo_s or {})
        for agent, value in [("default_slo_s", default_slo_s), *targets.items()]:
            if not (_number(value) and 0 <= value < math.inf):  # (NaN fails too)
                raise ConfigError(
                    f"Deadline SLO for {agent!r} must be a finite number ≥ 0, got {value!r}"
                )
        self._default = _ns(default_slo_s, "Deadline SLO for 'default_slo_s'")
        self._slo = {k: _ns(v, f"Deadline SLO for {k!r}") for k, v in targets.items()}

    def __call__(self, ticket: Ticket, state: SchedulerState, /) -> float:
        if ticket.deadline_ns is not None:
            return float(ticket.deadline_ns)
        return ticket.ready_ns + self._slo.get(ticket.agent, self._default)


def _ns(seconds: float, what: str) -> float:
    """``seconds`` (finite, checked) in nanoseconds, which must be finite too: a boost of
    1e300 s is inf ns, and a priority-0 ticket then ranks 0 × inf = NaN."""
    ns = seconds * _NS
    if not math.isfinite(ns):
        raise ConfigError(f"{what} is too large: {seconds!r} s overflows in nanoseconds")
    return ns


_BY_NAME: dict[str, type[FCFS] | type[FairShare] | type[PLAS] | type[Priority] | type[Deadline]] = {
    "fcfs": FCFS,
    "fair": FairShare,
    "plas": PLAS,
    "priority": Priority,
    "deadline": Deadline,
}


def policy_by_name(name: str) -> Policy:
    """A shipped policy with its defaults, by name.

    Names: ``fcfs``, ``fair``, ``plas``, ``priority``, ``deadline``.
    """
    try:
        return _BY_NAME[name]()
    except KeyError:
        raise ConfigError(
            f"unknown scheduling policy {name!r}; choose one of {sorted(_BY_NAME)}"
        ) from None
