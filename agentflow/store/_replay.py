"""In-memory tool state on resume: recorded calls of ``replay_on_resume`` tools run again.

A recorded tool result is never used to run its call again — except for tools that say
their effect lives in the process's memory (``Tool(replay_on_resume=True)``, e.g. an edit
to an in-memory file): a resumed process starts with that memory fresh, so before a
resumed session continues, every call of such a tool that the session recorded runs
again, in the order the session made them (turn by turn, in call order), with the same
arguments. Outputs are discarded: the recorded ones are what the model saw. A replayed
call that fails where the recorded one had succeeded means the state cannot be rebuilt:
:class:`~agentflow.StoreError`, naming the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentflow._errors import StoreError, ToolError
from agentflow._logging import get_logger

if TYPE_CHECKING:
    from agentflow._session import Session
    from agentflow.store._records import StoredSession

__all__ = ["replay_tools"]

_log = get_logger("agentflow.store")


async def replay_tools(stored: StoredSession, session: Session) -> int:
    """Run ``session``'s recorded calls of its agent's ``replay_on_resume`` tools again,
    in order; returns how many ran.

    Raises:
        StoreError: a replayed call failed where the recorded one had not.
    """
    agent = session.agent
    if not any(t.replay_on_resume for t in agent.tools):
        return 0
    ran = 0
    for turn in stored.turns:
        for call in turn.calls:
            recorded = turn.tool_results.get(call.id)
            tool = agent.tool(call.name)
            if recorded is None or tool is None or not tool.replay_on_resume:
                continue
            try:
                await tool.invoke(call.arguments, default_timeout_s=agent.tool_timeout_s)
            except ToolError as exc:
                if not recorded.is_error:
                    raise StoreError(
                        f"resume: replaying tool {call.name!r} (call {call.id!r}, session "
                        f"{stored.session_id!r}, turn {turn.turn}) failed where the recorded "
                        f"call had succeeded: {exc}"
                    ) from exc
            ran += 1
    if ran:
        _log.info("store.replayed", session=stored.session_id, calls=ran)
    return ran
