"""Which turns a :class:`~agentflow.context.FleetBudget` has counted, so that a resume
in the same process does not count them again.

A resumed run's recorded turns are charged to its agents' fleet budgets before its
sessions start (:mod:`agentflow.store._budgets`), as a new process's budgets start at
zero. A budget that ran those turns itself — the run was cancelled or failed, then
resumed in the same process with the same agents — already counted them: they are
skipped.

The memory is one entry per session id: the span of turns counted for it in a row (one
session's turns come in order) and the identity of the span's first turn — when its
request was sent and ended, and the server's response id. A recorded turn is skipped
when its session's span covers it and the recorded trace of the span's first turn is the
one counted (a session of the same id in another run has other times). A turn that does
not continue the span (another run's session of that id) starts a new one: a budget
shared by runs whose session ids repeat remembers the latest, and a resume of an older
one in the same process counts its turns again, as a new process would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentflow._trace import TurnTrace

__all__ = ["ChargedTurns"]

_Identity = tuple[int, int, str | None]


def _identity(trace: TurnTrace) -> _Identity:
    return (trace.sent_ns, trace.end_ns, trace.response_id)


@dataclass(slots=True)
class _Span:
    first: int
    last: int
    identity: _Identity


class ChargedTurns:
    """The turns one budget counted, per session id (see the module)."""

    __slots__ = ("_spans",)

    def __init__(self) -> None:
        self._spans: dict[str, _Span] = {}

    def note(self, session_id: str, turn: int, trace: TurnTrace) -> None:
        """Turn ``turn`` of ``session_id`` was counted, with ``trace``."""
        span = self._spans.get(session_id)
        if span is not None and span.first < turn <= span.last + 1:
            span.last = max(span.last, turn)
            return
        self._spans[session_id] = _Span(turn, turn, _identity(trace))

    def counted(self, session_id: str, turns: dict[int, TurnTrace]) -> range:
        """Which of a recorded session's ``turns`` (number to trace) were counted: the
        span noted for ``session_id`` when the recorded trace of its first turn is the
        one counted, else none."""
        span = self._spans.get(session_id)
        if span is None:
            return range(0)
        trace = turns.get(span.first)
        if trace is None or _identity(trace) != span.identity:
            return range(0)
        return range(span.first, span.last + 1)

    def cover(self, session_id: str, turns: dict[int, TurnTrace]) -> None:
        """Every one of a recorded session's ``turns`` is counted now (a recharge charged
        those not counted before)."""
        if not turns:
            return
        first, last = min(turns), max(turns)
        counted = self.counted(session_id, turns)
        if counted:  # (turns counted live past the recorded ones: those ran too)
            last = max(last, counted[-1])
        self._spans[session_id] = _Span(first, last, _identity(turns[first]))
