"""One tool's figures in :class:`~agentflow.stats.FleetStats`: calls, failures and a
sketch of their durations; figures of the same tool built in several workers merge."""

from __future__ import annotations

from agentflow.stats._sketch import Sketch

__all__ = ["ToolFigures"]


class ToolFigures:
    """One tool's calls: how many, how many failed, and their durations (a sketch).

    Attributes:
        calls: calls that ended.
        errors: calls that failed (raised, or timed out).
        durations: each call's duration, seconds.
    """

    __slots__ = ("calls", "durations", "errors")

    def __init__(self, relative_accuracy: float) -> None:
        self.calls = 0
        self.errors = 0
        self.durations = Sketch(relative_accuracy)

    def add(self, duration_s: float, is_error: bool) -> None:
        """One call that took ``duration_s``."""
        self.calls += 1
        self.errors += is_error
        self.durations.add(duration_s)

    def merge(self, other: ToolFigures) -> None:
        """Fold another worker's figures of the same tool in."""
        self.calls += other.calls
        self.errors += other.errors
        self.durations.merge(other.durations)
