"""A stored run's peak in flight, as its record shows it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentflow._session import SessionResult

__all__ = ["recorded_peak"]


def recorded_peak(sessions: Iterable[SessionResult]) -> int:
    """The most recorded turns whose request was streaming at once (sent → end): the
    run's peak in flight as its record shows it — failed attempts, not recorded, left
    out, so at most the live figure."""
    edges = sorted(
        edge
        for s in sessions
        for t in s.turns
        for edge in ((t.trace.sent_ns, 1), (t.trace.end_ns, -1))
    )  # an end sorts before a start at the same instant: back to back is not overlap
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak
