"""What a finished :class:`~agentflow.FleetResult` does not keep, noted as the run goes.

A result holds every finished turn (its trace and its failed attempts) but not when a
session failed before finishing a turn, when the retries of a turn that never finished
happened, nor any tool call's duration or outcome. :class:`RunJournal` is a fleet callback
that notes those — a few numbers per event, never the tool's output — on the fleet's
clock; :meth:`FleetStats.from_result(result, journal=…)
<agentflow.stats.FleetStats.from_result>` then places every retry and error in time and
adds the tool figures (``fleet.tool_s``, ``tool_errors``, the report's ``tools``).
A journal subscribed to ``Fleet.resume`` sees that attempt only: :meth:`RunJournal.add_stored`
makes it the whole run's from the run store's record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar, Literal

from agentflow._context_events import CompactionEvent
from agentflow._events import ErrorEvent, Event, RetryEvent, ToolResultEvent
from agentflow._trace import TurnTrace

if TYPE_CHECKING:
    from agentflow.store import StoredRun
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
        callbacks: whether callbacks' failures were noted (``False`` in a journal given a
            run store's record, which keeps none): the stats built with it report
            ``fleet.errors.callback`` as ``null``, not 0.
    """

    event_types: ClassVar[frozenset[str]] = frozenset(
        {"retry", "error", "tool_result", "compaction"}
    )

    def __init__(self, clock: Clock = time.perf_counter_ns) -> None:
        self.clock = clock
        self.entries: list[JournalEntry] = []
        self.compactions = True
        self.callbacks = True

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

    def add_stored(self, run: StoredRun, *, to_attempt: int | None = None) -> None:
        """Make this journal — subscribed to the latest attempt of a resumed run, or to
        none — the whole run's, from the run's record: ``from_result(resumed,
        journal=…)`` then counts every attempt's tool calls, not this attempt's only.

        Its tool entries become the tool results ``run`` recorded in every attempt (this
        one's included: its own are dropped, not counted twice): each call's name,
        outcome and duration, ended at about its turn's end plus its duration, and for a
        failed call its ``tool`` error. Its retries and other errors stay this
        attempt's, as noted (a result places the earlier attempts' from their record).
        It saw no compaction of the earlier attempts, and a store records none: its
        compactions are dropped and :attr:`compactions` becomes ``False``
        (``fleet.compaction`` is ``null``, as from the store). Nor does a store keep a
        callback's failures: :attr:`callbacks` becomes ``False`` too
        (``fleet.errors.callback`` is ``null``: the earlier attempts' are unknown).

        Args:
            run: the run as the store holds it after this attempt
                (``await store.load(run_id)``).
            to_attempt: the attempt whose clock every time is put on: by default the
                run's last — the clock of the result ``Fleet.resume`` returned and of
                this journal's own entries; ``0`` for a result read back from the store
                (:func:`~agentflow.store.load_result`, on the first attempt's clock).
        """
        from agentflow.store._export import stored_tool_entries

        this = run.attempts[-1].attempt if run.attempts else 0
        to = this if to_attempt is None else to_attempt
        shift = run.clock_offset(this, to)
        kept = [
            replace(e, t_ns=e.t_ns + shift)
            for e in self.entries
            if e.kind in ("retry", "error") and not (e.kind == "error" and e.where == "tool")
        ]
        stored = stored_tool_entries(run, to)
        self.entries[:] = sorted([*stored, *kept], key=lambda e: e.t_ns)
        self.compactions = False
        self.callbacks = False
