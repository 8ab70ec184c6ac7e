"""The tool calls a model turn of a :class:`~agentflow.Session` asked for: each run
(outside the turn's admission slot, concurrently, within the fleet's tool bound), its
output capped and told to the run store and the bus, then every result appended in call
order; what a result becomes before it is sent (:func:`cap_output`, and
:func:`~agentflow._sendable.sendable_text`).
A resumed session's recorded outputs are used as they are, never run again. The turn loop
that calls it is in ``_session.py``.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from types import MappingProxyType
from typing import TYPE_CHECKING

from agentflow._errors import ToolError
from agentflow._events import ErrorEvent, ToolCallEvent, ToolResultEvent
from agentflow._gather import gather_or_cancel
from agentflow._sendable import sendable_text

if TYPE_CHECKING:
    from agentflow._event_bus import EventBus
    from agentflow._session import Session
    from agentflow._trace import ToolCall
    from agentflow.typing import Clock

__all__ = ["cap_output", "run_tools"]


async def run_tools(
    session: Session,
    index: int,
    calls: tuple[ToolCall, ...],
    bus: EventBus,
    limit: asyncio.Semaphore | None,
    clock: Clock,
) -> None:
    """Run turn ``index``'s tool ``calls`` and append their results to ``session``."""
    # The caller binds the turn: tools log it. One call's error ends the session
    # (tool_errors="raise"): its siblings are cancelled, not left running past its end.
    outputs = await gather_or_cancel(
        *[_run_tool(session, index, c, bus, limit, clock) for c in calls]
    )
    for call, output in zip(calls, outputs, strict=True):
        session.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    if session._known_outputs:
        session._known_outputs = MappingProxyType({})


async def _run_tool(
    session: Session,
    index: int,
    call: ToolCall,
    bus: EventBus,
    limit: asyncio.Semaphore | None,
    clock: Clock,
) -> str:
    known = session._known_outputs
    if call.id in known:  # recorded before the run was stopped: never run twice
        return known[call.id]
    if bus.wants("tool_call"):
        bus.emit(
            ToolCallEvent(
                agent=session.agent.name, session_id=session.session_id, turn=index, call=call
            )
        )
    start = clock()
    is_error = False
    tool = session.agent.tool(call.name)
    try:
        if tool is None:
            raise ToolError(f"the model called unknown tool {call.name!r}", tool=call.name)
        async with limit if limit is not None else nullcontext():
            # From here: the call's duration is the call's, not the wait for a
            # max_tool_concurrency slot behind other sessions' tools.
            start = clock()
            output = await tool.invoke(
                call.arguments, default_timeout_s=session.agent.tool_timeout_s
            )
    except ToolError as exc:
        if session.agent.tool_errors == "raise":
            raise
        is_error, output = True, f"Error: {exc}"
        bus.emit(
            ErrorEvent(
                agent=session.agent.name,
                session_id=session.session_id,
                turn=index,
                where="tool",
                error=exc,
            )
        )
    cap = session.agent.max_tool_output_chars
    if tool is not None and tool.max_output_chars is not None:
        cap = tool.max_output_chars
    # (a lone surrogate could be neither sent nor stored: U+FFFD instead)
    output, cut = cap_output(sendable_text(output), cap)
    duration = (clock() - start) / 1e9
    if session._log is not None:
        session._log.tool_finished(session, index, call, output, is_error, duration, cut)
    if bus.wants("tool_result"):
        bus.emit(
            ToolResultEvent(
                agent=session.agent.name,
                session_id=session.session_id,
                turn=index,
                call_id=call.id,
                name=call.name,
                output=output,
                is_error=is_error,
                duration_s=duration,
                truncated_chars=cut,
            )
        )
    return output


def cap_output(text: str, limit: int | None) -> tuple[str, int]:
    """``text`` cut to its first ``limit`` characters, and how many were cut.

    A cut text ends with a marker line the model can read, e.g.
    ``[agentflow: tool output truncated: 1,000 of 25,000 characters shown]``, so the
    text sent is at most ``limit`` characters plus that line. ``None`` is no limit.
    """
    if limit is None or len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    marker = f"\n[agentflow: tool output truncated: {limit:,} of {len(text):,} characters shown]"
    return text[:limit] + marker, cut
