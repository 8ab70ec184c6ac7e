"""Tool call ids unique within a session, whatever ids the server sends.

A tool result is known by its call's id alone: in the transcript (a ``tool`` message's
``tool_call_id``), to a resumed session (the outputs recorded before it stopped) and in
a run store, which keys a result on (run, session, call id) and refuses a second one
under a key it holds. Some servers and gateways repeat ids — ``"0"`` in every turn, or
one id for two parallel calls — and the store then dropped the later results: a
finished run could not be read back, and a resume ran a recorded call again.

So a turn's calls are checked as its trace comes back, before anything else sees them
(context links, the transcript, the run store, events): a call whose id the session has
used already — in its given history, in an earlier turn (dropped from the history since,
or recorded before a resume), or earlier in the same turn — is renamed
``<id>_t<turn>c<position>`` (``_2``, ``_3``, … after it if that is taken too). The name
depends only on the session's ids so far and the turn's calls, so a turn run again after
a kill, given the same answer, names its calls alike. The ids used are gathered once, the
first time a turn asks for tools, from the messages and the turns; each turn's calls are
added as they are checked. (One case names a call otherwise on resume: an id of the
*given* history that a context policy dropped before the cut is not in the rebuilt
messages, so a later call reusing it keeps it. No stored result is keyed by such an id,
so nothing is refused or run twice.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentflow._session import Session
    from agentflow._session_types import TurnRecord
    from agentflow._trace import TurnTrace

__all__ = ["unique_call_ids"]


def unique_call_ids(session: Session, index: int, trace: TurnTrace) -> TurnTrace:
    """``trace`` (turn ``index`` of ``session``) with every tool call id the session has
    used already replaced by a new one (the module says how); ``trace`` itself when none
    is."""
    calls = trace.tool_calls
    if not calls:
        return trace
    used = session._call_ids
    if used is None:
        used = session._call_ids = ids_in(session.messages, session.turns)
    renamed = None
    for pos, call in enumerate(calls):
        call_id = call.id
        if call_id in used:
            call_id = _fresh(f"{call.id}_t{index}c{pos}", used)
            if renamed is None:
                renamed = list(calls)
            renamed[pos] = dataclasses.replace(call, id=call_id)
        used.add(call_id)
    if renamed is None:
        return trace
    return dataclasses.replace(trace, tool_calls=tuple(renamed))


def ids_in(messages: Sequence[Mapping[str, Any]], turns: Iterable[TurnRecord] = ()) -> set[str]:
    """The tool call ids ``messages`` name (an assistant message's calls, a tool
    result's ``tool_call_id``) and the calls of ``turns``."""
    used: set[str] = set()
    for m in messages:
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            for c in calls:
                call_id = c.get("id") if isinstance(c, Mapping) else None
                if isinstance(call_id, str):
                    used.add(call_id)
        call_id = m.get("tool_call_id")
        if isinstance(call_id, str):
            used.add(call_id)
    for t in turns:
        used.update(c.id for c in t.trace.tool_calls)
    return used


def _fresh(base: str, used: set[str]) -> str:
    """``base``, or the first of ``base_2``, ``base_3``, … not in ``used``."""
    name, k = base, 2
    while name in used:
        name, k = f"{base}_{k}", k + 1
    return name
