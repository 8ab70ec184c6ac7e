"""What a finished :class:`~agentflow.FleetResult` does not keep, noted as the run goes.

A result holds every finished turn (its trace and its failed attempts) but not when a
session failed before finishing a turn, when the retries of a turn that never finished
happened, nor any tool call's duration or outcome. :class:`RunJournal` is a fleet callback
that notes those — a few numbers per event, never the tool's output — on the fleet's
clock; :meth:`FleetStats.from_result(result, journal=…)
<agentflow.stats.FleetStats.from_result>` then places every retry and error in time and
adds the tool figures (``fleet.tool_s``, ``tool_errors``, the report's ``tools``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from agentflow._context_events import CompactionEvent
from agentflow._events import ErrorEvent, Event, RetryEvent, ToolResultEvent
from agentflow._trace import TurnTrace

if TYPE_CHECKING:
    from agentflow.typing import Clock

__all__ = ["JournalEntry", "RunJournal"]


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One noted event.

    Attributes:
        t_ns: when it was seen, on the journal's clock (the fleet's).
        kind: ``"retry"`` (a failed attempt sent again), ``"error"`` (see ``where``),
            ``"tool"`` (a tool call ended) or ``"compaction"`` (a context policy's
            summary request: its ``trace``).
        agent, session_id, turn: whose.
        where: for an error: ``"session"``, ``"tool"`` or ``"callback"``; for a tool call,
            the tool's name.
        duration_s: a tool call's duration (0 otherwise).
        is_error: whether a tool call failed.
        trace: a compaction's summary request (its usage: what the server did for it).
    """

    t_ns: int
    kind: Literal["retry", "error", "tool", "compaction"]
    agent: str | None
    session_id: str | None
    turn: int | None
    where: str = ""
    duration_s: float = 0.0
    is_error: bool = False
    trace: TurnTrace | None = None


class RunJournal:
    """A fleet callback noting when retries and errors happen and what each tool call
    took, for :meth:`FleetStats.from_result <agentflow.stats.FleetStats.from_result>`.

    Give it the fleet's clock (``Fleet(clock=…)``; ``time.perf_counter_ns`` by default)
    so that its times are on the traces' clock. It reads only ``retry``, ``error``,
    ``tool_result`` and ``compaction`` events and keeps one small tuple each (a
    compaction's, its summary request's trace).

    Args:
        clock: the fleet's nanosecond clock.

    Attributes:
        entries: what it noted, in order.
        compactions: whether compactions were noted (``False`` in a journal rebuilt from
            a run store, which records none): the stats built with it report
            ``fleet.compaction`` as ``null``, not measured.
    """

    event_types: ClassVar[frozenset[str]] = frozenset(
        {"retry", "error", "tool_result", "compaction"}
    )

    def __init__(self, clock: Clock = time.perf_counter_ns) -> None:
        self.clock = clock
        self.entries: list[JournalEntry] = []
        self.compactions = True

    def __call__(self, event: Event) -> None:
        """Note one event (others are ignored)."""
        if isinstance(event, RetryEvent):
            self.entries.append(
                JournalEntry(self.clock(), "retry", event.agent, event.session_id, event.turn)
            )
        elif isinstance(event, ErrorEvent):
            self.entries.append(
                JournalEntry(
                    self.clock(), "error", event.agent, event.session_id, event.turn, event.where
                )
            )
        elif isinstance(event, CompactionEvent):
            self.entries.append(
                JournalEntry(
                    self.clock(),
                    "compaction",
                    event.agent,
                    event.session_id,
                    event.turn,
                    trace=event.trace,
                )
            )
        elif isinstance(event, ToolResultEvent):
            self.entries.append(
                JournalEntry(
                    self.clock(),
                    "tool",
                    event.agent,
                    event.session_id,
                    event.turn,
                    event.name,
                    event.duration_s,
                    event.is_error,
                )
            )
