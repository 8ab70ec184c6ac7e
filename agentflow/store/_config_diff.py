"""What differs between the agent a run recorded and the one given to resume it: the
refusal of a changed agent names the settings that changed (``model: 'sim' → 'other'``,
``instructions differ``, ``tool 'lookup' schema differs``) rather than listing everything
that might have.

The store keeps, per agent name, its system prompt and a JSON summary of the rest of its
configuration (:class:`~agentflow.store.AgentInfo`); the given agent's is made the same
way and compared key by key. A summary recorded by an older agentflow may lack a key
(the tools' own limits, say): it is not compared. One recorded under an earlier
fingerprint definition (:func:`~agentflow.store._codec.fingerprints`) describes its tool
schemas and context as that definition did — without what ``Annotated[...]`` hints or
``Field(...)`` defaults add, a chain holding a ``ContextBudget`` named ``ContextBudget``:
the given agent is compared described that way too, so that only what changed is named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from agentflow.store._codec import (
    _before_annotated,
    _before_field_defaults,
    _config,
    _context_name,
)

if TYPE_CHECKING:
    from agentflow._agent import Agent
    from agentflow.store._records import AgentInfo

__all__ = ["config_changes"]

#: Settings shown with both values (short ones); a longer value is said to differ.
_SHOWN = 60


def config_changes(recorded: AgentInfo, agent: Agent) -> list[str]:
    """What of ``agent`` differs from ``recorded``, one phrase per setting (empty when
    the summaries agree: what changed is not in them)."""
    given = msgspec.json.decode(msgspec.json.encode(_config(agent)))
    before: Mapping[str, Any] = recorded.config
    out: list[str] = []
    if recorded.instructions != agent.instructions:
        out.append("instructions differ")
    for key, now in given.items():
        if key not in before or key in ("tools", "tool_limits") or before[key] == now:
            continue
        if key == "context" and before[key] in _context_names(agent):
            continue
        if key == "params" and isinstance(before[key], Mapping) and isinstance(now, Mapping):
            out.extend(_changed("params", before[key], now))
        else:
            out.append(_change(key, before[key], now))
    out.extend(_tools_as_recorded(before.get("tools"), agent, given["tools"]))
    if isinstance(before.get("tool_limits"), Mapping):
        out.extend(_limits(before["tool_limits"], given["tool_limits"]))
    return out


def _context_names(agent: Agent) -> set[str | None]:
    """The names ``agent``'s context had under the fingerprint definitions a run may
    hold: its own and, for a chain holding a ``ContextBudget``, ``ContextBudget`` (the
    type alone, before the chain existed)."""
    names = {_context_name(agent.context)}
    links = getattr(agent.context, "given", None)
    if isinstance(links, tuple) and any(
        type(link).__qualname__ == "ContextBudget" for link in links
    ):
        names.add("ContextBudget")
    return names


def _tools_as_recorded(before: object, agent: Agent, now: list[Any]) -> list[str]:
    """:func:`_tools` of ``agent``'s schemas as described now or, when fewer differ, as
    the earlier definitions described them (the one the record was made with)."""
    out = _tools(before, now)
    if not out:
        return out
    for earlier in (_before_field_defaults(agent), _before_annotated(agent)):
        if earlier is not None:
            specs = msgspec.json.decode(msgspec.json.encode(earlier.tool_specs))
            then = _tools(before, specs)
            if len(then) < len(out):
                out = then
    return out


def _limits(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The limits changed of the tools both have: ``tool 'x' timeout_s: None → 30.0``."""
    out = []
    for name in sorted(set(before) & set(now)):
        old, new = before[name], now[name]
        if old == new:
            continue
        if not isinstance(old, Mapping) or not isinstance(new, Mapping):
            out.append(f"tool {name!r} limits differ")
            continue
        out.extend(
            _change(f"tool {name!r} {key}", old.get(key), new.get(key))
            for key in sorted({*old, *new})
            if old.get(key) != new.get(key)
        )
    return out


def _change(what: str, before: object, now: object) -> str:
    shown = f"{what}: {before!r} → {now!r}"
    return shown if len(shown) <= len(what) + _SHOWN else f"{what} differs"


def _changed(what: str, before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Per key of two mappings, what changed: ``what['key']: 1 → 2``, added, removed."""
    out = []
    for key in sorted({*before, *now}, key=str):
        name = f"{what}[{key!r}]"
        if key not in now:
            out.append(f"{name} removed")
        elif key not in before:
            shown = f"{name} added: {now[key]!r}"
            out.append(shown if len(shown) <= len(name) + _SHOWN else f"{name} added")
        elif before[key] != now[key]:
            out.append(_change(name, before[key], now[key]))
    return out


def _tools(before: object, now: list[Any]) -> list[str]:
    """The tools added, removed or whose schema differs, by name (their order is not a
    difference: the specs are sorted by name)."""
    if not isinstance(before, list):
        return []
    old, new = _by_name(before), _by_name(now)
    out = []
    for name in sorted({*old, *new}):
        if name not in new:
            out.append(f"tool {name!r} removed")
        elif name not in old:
            out.append(f"tool {name!r} added")
        elif old[name] != new[name]:
            out.append(f"tool {name!r} schema differs")
    return out


def _by_name(tools: list[Any]) -> dict[str, Any]:
    return {_name(t): t for t in tools}


def _name(tool: object) -> str:
    if isinstance(tool, Mapping):
        fn = tool.get("function")
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            return str(fn["name"])
    return repr(tool)
