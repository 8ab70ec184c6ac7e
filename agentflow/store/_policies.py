"""Context policies' learnt state across a resume: the calibrator's fit.

A :class:`~agentflow.context.Calibrator` learns, per model and content kind, how the
server's prompt count relates to the local estimate. It lives in memory, so a resumed
process would start it afresh and its first estimates (and the budget margins drawn
from them) would be those of an untrained calibrator. The store keeps its state
(:meth:`Calibrator.to_state`) as a :class:`PolicyState` record, written when a session
of an agent using it ends and when the attempt ends; :meth:`Fleet.resume` restores the
last one written (:meth:`Calibrator.load_state`) before its sessions start.

A calibrator is found through an agent's context: the ``calibrator`` attribute of the
context, or of the first link of its chain that has one (a
:class:`~agentflow.context.ContextBudget`'s); one shared by several agents
is keyed ``calibrator:<name>`` by the first of their names in sorted order, so the
key is the same in the process that recorded it and the one resuming.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentflow._errors import ConfigError
from agentflow._logging import get_logger
from agentflow.context._calibration import Calibrator

if TYPE_CHECKING:
    from agentflow._agent import Agent

__all__ = ["calibrators", "restore"]

_log = get_logger("agentflow.store")


def calibrators(agents: Iterable[Agent]) -> dict[int, tuple[str, Calibrator]]:
    """The calibrators ``agents`` use, by ``id``: their key and the calibrator."""
    found: dict[int, tuple[str, Calibrator]] = {}
    for agent in sorted(agents, key=lambda a: a.name):
        cal = calibrator_of(agent)
        if cal is not None and id(cal) not in found:
            found[id(cal)] = (f"calibrator:{agent.name}", cal)
    return found


def calibrator_of(agent: Agent) -> Calibrator | None:
    """The calibrator ``agent``'s context uses, if any: the context's own, or the first
    link's of its chain (``Agent(context=[...])`` is a chain)."""
    context: Any = agent.context
    links: Any = getattr(context, "links", None)
    if links is None:
        links = context if isinstance(context, list | tuple) else (context,)
    for link in links:
        cal: Any = getattr(link, "calibrator", None)
        if isinstance(cal, Calibrator):
            return cal
    return None


def restore(states: Mapping[str, Any], agents: Iterable[Agent]) -> int:
    """Load each recorded calibrator state into the calibrator ``agents`` use under the
    same key; returns how many were restored. A state that cannot be loaded is logged
    and skipped (that calibrator starts afresh, as it did before states were kept)."""
    restored = 0
    for key, cal in calibrators(agents).values():
        state = states.get(key)
        if state is None:
            continue
        try:
            cal.load_state(state)
        except ConfigError as exc:
            _log.warning("store.policy_state_skipped", key=key, error=str(exc))
            continue
        restored += 1
    return restored
