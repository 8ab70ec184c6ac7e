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
:class:`~agentflow.context.ContextBudget`'s). Its state is keyed ``calibrator:<name>`` by
the first of its agents' names in sorted order; its other agents' names are kept in one
more record, ``calibrator:<name>#aliases`` → ``{"aliases": [...], "of":
"calibrator:<name>"}`` (once per attempt: one record, not one per agent — the demo's 64
agents share one calibrator), so that a resume given only some of the agents — those
whose sessions are not done — still finds it. A resumed attempt goes on recording under
the key it restored from, so that key stays the newest. (A run recorded before aliases
is found through the first name, as it was then.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from agentflow._errors import ConfigError
from agentflow._logging import get_logger
from agentflow.context._calibration import Calibrator

if TYPE_CHECKING:
    from agentflow._agent import Agent

__all__ = ["Tracked", "aliases", "calibrator_of", "calibrators", "restore", "restore_keys"]

_log = get_logger("agentflow.store")


class Tracked(NamedTuple):
    """A calibrator whose state a run keeps: its key, and the aliases that name it."""

    key: str
    calibrator: Calibrator
    aliases: tuple[str, ...]


def calibrators(
    agents: Iterable[Agent], keys: Mapping[int, str] | None = None
) -> dict[int, Tracked]:
    """The calibrators ``agents`` use, by ``id``: the key each is kept under (``keys``'
    when it has one — where a resume found it —, else that of its first agent in sorted
    order) and an alias for each other agent's name."""
    names: dict[int, list[str]] = {}
    found: dict[int, Calibrator] = {}
    for agent in sorted(agents, key=lambda a: a.name):
        cal = calibrator_of(agent)
        if cal is not None:
            found[id(cal)] = cal
            names.setdefault(id(cal), []).append(_key(agent.name))
    out: dict[int, Tracked] = {}
    for cid, cal in found.items():
        own = names[cid]
        key = (keys or {}).get(cid, own[0])
        out[cid] = Tracked(key, cal, tuple(dict.fromkeys(k for k in own if k != key)))
    return out


def _key(name: str) -> str:
    return f"calibrator:{name}"


def aliases(tracked: Tracked) -> tuple[str, dict[str, Any]]:
    """The key and state of the record that names ``tracked``'s other agents' keys."""
    return f"{tracked.key}#aliases", {"aliases": list(tracked.aliases), "of": tracked.key}


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
    """Load each recorded calibrator state into the calibrator ``agents`` use; returns
    how many were restored (see :func:`restore_keys`)."""
    return len(restore_keys(states, agents))


def restore_keys(states: Mapping[str, Any], agents: Iterable[Agent]) -> dict[int, str]:
    """Load each recorded calibrator state into the calibrator ``agents`` use: the state
    under the key of the first of its agents' names (in sorted order) that has one,
    through its alias. Returns, by calibrator ``id``, the key each was restored from
    (where the resumed attempt goes on recording it). A state that cannot be loaded is
    logged and skipped (that calibrator starts afresh, as it did before states were
    kept)."""
    restored: dict[int, str] = {}
    for cid, tracked in calibrators(agents).items():
        for name in sorted((tracked.key, *tracked.aliases)):
            key, state = _resolve(states, name)
            if state is None:
                continue
            try:
                tracked.calibrator.load_state(state)
            except ConfigError as exc:
                _log.warning("store.policy_state_skipped", key=key, error=str(exc))
                break
            restored[cid] = key
            break
    return restored


def _resolve(states: Mapping[str, Any], key: str) -> tuple[str, Any]:
    """The key and state ``key`` names: its own, else the state of the key whose aliases
    record lists it (``None`` if there is none)."""
    state = states.get(key)
    if state is not None and not _is_aliases(state):
        return key, state
    for record in states.values():
        if _is_aliases(record) and key in record["aliases"]:
            target = str(record["of"])
            found = states.get(target)
            return target, None if _is_aliases(found) else found
    return key, None


def _is_aliases(state: Any) -> bool:
    """Whether ``state`` is an aliases record, well formed (a damaged one, its fields of
    other types, names nothing)."""
    return (
        isinstance(state, Mapping)
        and set(state) == {"aliases", "of"}
        and isinstance(state["aliases"], list)
        and isinstance(state["of"], str)
    )
