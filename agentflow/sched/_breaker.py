"""A per-endpoint circuit breaker: stop sending to a replica that keeps failing.

closed → (``threshold`` failures in a row) → open for ``cooldown_s`` → half-open:
one request goes through as a probe → success closes, failure re-opens with the
cooldown doubled (up to ``max_cooldown_s``).

Only the probe decides once the circuit has opened: :meth:`CircuitBreaker.on_send`
says whether a request is the probe, and its verdict is passed back. A request sent
before the circuit opened and ending after it — a slow stream, a success or a failure
from before the trip — says nothing about the endpoint *now*: it neither closes the
circuit nor re-opens it.
"""

from __future__ import annotations

from typing import Literal

from agentflow._errors import ConfigError
from agentflow.typing import Clock

__all__ = ["CircuitBreaker", "CircuitState"]

#: Where a breaker stands.
CircuitState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Tracks one endpoint's health.

    Args:
        threshold: consecutive failures that open the circuit.
        cooldown_s: how long it stays open before a probe is let through.
        max_cooldown_s: the cap for the cooldown as repeated probes fail.
        clock: nanosecond monotonic clock.
    """

    __slots__ = (
        "_base",
        "_clock",
        "_cooldown",
        "_max",
        "_open_until",
        "_probing",
        "failures",
        "opened",
        "threshold",
    )

    def __init__(
        self,
        clock: Clock,
        *,
        threshold: int = 5,
        cooldown_s: float = 5.0,
        max_cooldown_s: float = 60.0,
    ) -> None:
        if not isinstance(threshold, int) or threshold < 1:
            raise ConfigError(f"breaker threshold must be an int ≥ 1, got {threshold!r}")
        if not 0 < cooldown_s <= max_cooldown_s:
            raise ConfigError(
                f"breaker cooldown_s must be > 0 and ≤ max_cooldown_s, got {cooldown_s!r}"
            )
        self._clock = clock
        self.threshold = threshold
        self._base = self._cooldown = int(cooldown_s * 1e9)
        self._max = int(max_cooldown_s * 1e9)
        self._open_until: int | None = None
        self._probing = False
        #: Consecutive failures now.
        self.failures = 0
        #: How many times the circuit opened.
        self.opened = 0

    @property
    def state(self) -> CircuitState:
        """``closed``, ``open`` or ``half_open`` (a probe may go, or is out)."""
        if self._open_until is None:
            return "closed"
        return "open" if self._clock() < self._open_until else "half_open"

    def allows(self) -> bool:
        """Whether a request may be sent now (in half-open, only one probe at a time)."""
        state = self.state
        return state == "closed" or (state == "half_open" and not self._probing)

    def opens_in_ns(self) -> int:
        """Nanoseconds until a probe may go (0 if one may go now)."""
        if self._open_until is None:
            return 0
        return max(0, self._open_until - self._clock())

    def on_send(self) -> bool:
        """A request was sent; returns whether it is the probe (sent while not closed).

        Pass the result back to :meth:`on_success`, :meth:`on_failure` or
        :meth:`on_abandon` when the request ends.
        """
        if self._open_until is not None:
            self._probing = True
            return True
        return False

    def on_success(self, probe: bool = False) -> None:
        """A request succeeded: clears the failure count; the probe's closes the circuit."""
        if self._open_until is None:
            self.failures = 0
        elif probe:
            self.failures = 0
            self._open_until = None
            self._probing = False
            self._cooldown = self._base

    def on_abandon(self, probe: bool = False) -> None:
        """A request ended with no verdict (cancelled): if it was the probe, another may go."""
        if probe:
            self._probing = False

    def on_failure(self, probe: bool = False) -> None:
        """A request failed in a way that blames the endpoint."""
        if self._open_until is None:
            self.failures += 1
            if self.failures >= self.threshold:
                self._trip()
        elif probe:
            self.failures += 1
            self._probing = False
            self._cooldown = min(self._cooldown * 2, self._max)
            self._trip()

    def _trip(self) -> None:
        self._open_until = self._clock() + self._cooldown
        self.opened += 1

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r}, failures={self.failures})"
