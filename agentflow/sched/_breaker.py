"""A per-endpoint circuit breaker: stop sending to a replica that keeps failing.

closed → (of its last ``window`` outcomes, at least ``threshold`` failed, and the
failures are at least ``failure_rate`` of them) → open for ``cooldown_s`` → half-open:
one request goes through as a probe → success closes (and forgets the window), failure
re-opens with the cooldown doubled (up to ``max_cooldown_s``).

**A rate, not a run.** Outcomes arrive in the order requests *end*, not the order they
were sent: a 500 or a 503 comes back in milliseconds while the successes sent with it
are still streaming. Counting failures "in a row" mistakes a burst of fast errors among
slow successes for a dead server. The breaker therefore judges the share of failures
among recent outcomes, successes included (a success that ends after a run of failures
still counts), and needs ``threshold`` failures before it judges at all.

**Held closed.** :meth:`CircuitBreaker.on_failure` takes ``may_open``: the scheduler
passes ``False`` when this is the last replica whose breaker is closed. Opening it then
would leave the router nowhere to send — every turn would queue behind one probe — which
is worse than no breaker. The breaker stays closed and only reports :attr:`failing`.

Only the probe decides once the circuit has opened: :meth:`CircuitBreaker.on_send`
says whether a request is the probe, and its verdict is passed back. A request sent
before the circuit opened and ending after it — a slow stream, a success or a failure
from before the trip — says nothing about the endpoint *now*: it neither closes the
circuit nor re-opens it.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds, shown
from agentflow.sched._limits import _number
from agentflow.typing import Clock

__all__ = ["CircuitBreaker", "CircuitState"]

#: Where a breaker stands.
CircuitState = Literal["closed", "open", "half_open"]


def check_breaker_values(
    prefix: str,
    *,
    threshold: int,
    failure_rate: float,
    window: int,
    cooldown_s: float,
    max_cooldown_s: float | None,
) -> None:
    """Each of a breaker's settings on its own, the error naming ``prefix`` + the field
    (``"CircuitBreaker."``, or ``"Replica.breaker_"`` where a replica is made, so that it
    refuses what its breaker would, not a run later): counts ≥ 1, a rate in (0, 1],
    cooldowns in [1 ns, :data:`MAX_TIMEOUT_S`] (``max_cooldown_s`` ``None``: not given).

    Raises:
        ConfigError: naming the first setting that is not one.
    """
    check_count(threshold, f"{prefix}threshold")
    # (A str rate was a bare TypeError, a bool cooldown taken as 1 s.)
    if not _number(failure_rate) or not 0 < failure_rate <= 1:
        raise ConfigError(
            f"{prefix}failure_rate must be a number in (0, 1], got {shown(failure_rate)}"
        )
    check_count(window, f"{prefix}window")
    check_seconds(cooldown_s, f"{prefix}cooldown_s", 1e-9, MAX_TIMEOUT_S)
    if max_cooldown_s is not None:
        check_seconds(max_cooldown_s, f"{prefix}max_cooldown_s", 1e-9, MAX_TIMEOUT_S)


class CircuitBreaker:
    """Tracks one endpoint's health.

    Args:
        threshold: failures among the last ``window`` outcomes before the circuit may
            open (also the fewest outcomes it judges).
        failure_rate: the share of the last ``window`` outcomes that must be failures
            for the circuit to open, in (0, 1].
        window: how many of the most recent outcomes are judged (at least ``threshold``).
        cooldown_s: how long it stays open before a probe is let through.
        max_cooldown_s: the cap for the cooldown as repeated probes fail.
        clock: nanosecond monotonic clock.

    Raises:
        ConfigError: a setting is not a number (a bool is not one) in its range, naming it.
    """

    __slots__ = (
        "_base",
        "_clock",
        "_cooldown",
        "_max",
        "_open_until",
        "_outcomes",
        "_probing",
        "failure_rate",
        "failures",
        "held",
        "opened",
        "threshold",
    )

    def __init__(
        self,
        clock: Clock,
        *,
        threshold: int = 5,
        failure_rate: float = 0.5,
        window: int = 20,
        cooldown_s: float = 5.0,
        max_cooldown_s: float = 60.0,
    ) -> None:
        check_breaker_values(
            "CircuitBreaker.",
            threshold=threshold,
            failure_rate=failure_rate,
            window=window,
            cooldown_s=cooldown_s,
            max_cooldown_s=max_cooldown_s,
        )
        if cooldown_s > max_cooldown_s:
            raise ConfigError(
                f"CircuitBreaker.cooldown_s must be ≤ max_cooldown_s ({max_cooldown_s!r}), "
                f"got {cooldown_s!r}"
            )
        self._clock = clock
        self.threshold = threshold
        self.failure_rate = failure_rate
        self._outcomes: deque[bool] = deque(maxlen=max(window, threshold))
        self._base = self._cooldown = int(cooldown_s * 1e9)
        self._max = int(max_cooldown_s * 1e9)
        self._open_until: int | None = None
        self._probing = False
        #: Failures among the outcomes in the window now.
        self.failures = 0
        #: How many times the circuit opened.
        self.opened = 0
        #: How many times it would have opened but was held closed (``may_open=False``).
        self.held = 0

    @property
    def state(self) -> CircuitState:
        """``closed``, ``open`` or ``half_open`` (a probe may go, or is out)."""
        if self._open_until is None:
            return "closed"
        return "open" if self._clock() < self._open_until else "half_open"

    @property
    def window(self) -> int:
        """How many recent outcomes are judged."""
        maxlen = self._outcomes.maxlen
        assert maxlen is not None
        return maxlen

    @property
    def failing(self) -> bool:
        """Whether the endpoint is judged down: the circuit is not closed, or its recent
        outcomes meet the opening rule (it is held closed)."""
        return self._open_until is not None or self._judged_failing()

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
        """A request succeeded: counted in the window; the probe's closes the circuit."""
        if self._open_until is None:
            self._record(False)
        elif probe:
            self._outcomes.clear()
            self.failures = 0
            self._open_until = None
            self._probing = False
            self._cooldown = self._base

    def on_abandon(self, probe: bool = False) -> None:
        """A request ended with no verdict (cancelled): if it was the probe, another may go."""
        if probe:
            self._probing = False

    def on_failure(self, probe: bool = False, *, may_open: bool = True) -> None:
        """A request failed in a way that blames the endpoint.

        Args:
            probe: what :meth:`on_send` returned for it.
            may_open: ``False`` holds a closed circuit closed even if the failures call
                for opening it (the last replica the router could use).
        """
        if self._open_until is None:
            self._record(True)
            if self._judged_failing():
                if may_open:
                    self._trip()
                else:
                    self.held += 1
        elif probe:
            self._probing = False
            self._cooldown = min(self._cooldown * 2, self._max)
            self._trip()

    def _record(self, failed: bool) -> None:
        outcomes = self._outcomes
        if len(outcomes) == outcomes.maxlen and outcomes[0]:
            self.failures -= 1  # the oldest outcome, a failure, leaves the window
        outcomes.append(failed)
        if failed:
            self.failures += 1

    def _judged_failing(self) -> bool:
        failures = self.failures
        return (
            failures >= self.threshold
            and failures >= self.failure_rate * len(self._outcomes) - 1e-9  # 0.3 × 10 > 3.0
        )

    def _trip(self) -> None:
        self._open_until = self._clock() + self._cooldown
        self.opened += 1

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(state={self.state!r}, failures={self.failures}/{len(self._outcomes)})"
        )
