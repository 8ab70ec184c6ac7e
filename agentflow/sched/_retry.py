"""Which failures are retried, and how long to wait first (tenacity underneath).

Retried by default: 429 (after its ``Retry-After`` when the server sent one), 408
(the server stopped waiting for the request: an :class:`~agentflow.APIStatusError`, not
a ``BadRequestError``), 500, 502, 503, 504 (an error object sent inside the stream: by
its code), connection errors, timeouts, and a stream cut mid-way — dropped, or ended
cleanly with no finish reason and no ``[DONE]`` (the turn is re-run; the partial output
is discarded and recorded on the turn). Never retried: other 4xx (``BadRequestError``:
the request itself is wrong), malformed streams (opt in), tool errors, context overflows
and cancellation.

Waits: the server's ``Retry-After`` when given (capped), otherwise jittered
exponential backoff (tenacity's ``wait_random_exponential``, "full jitter"). With
``failover``, a retry that can go to another healthy replica waits the backoff, not
the ``Retry-After`` of the replica it leaves.

Giving up: after ``max_attempts`` tries; and while every replica is down, once
``give_up_after_s`` has passed since the turn's first attempt began (the runner checks
the fleet's state; the turn then fails with :class:`~agentflow.AllReplicasDown`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random_exponential,
)

from agentflow._counts import check_count, check_flag
from agentflow._errors import (
    APIStatusError,
    BadRequestError,
    ConfigError,
    ConnectError,
    RateLimitError,
    ServerError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
)
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds, shown
from agentflow.sched._limits import _number

__all__ = ["RetryPolicy"]

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a turn that failed on the wire is retried.

    Attributes:
        max_attempts: tries per turn, the first included (1 = never retry).
        backoff_s: the base of the exponential backoff.
        max_backoff_s: the longest backoff wait.
        max_retry_after_s: the longest ``Retry-After`` obeyed; longer is capped to it.
            These three are finite numbers of seconds from 0 to 1e9 (~31 years).
        jitter: randomise backoff ("full jitter"); off gives exact waits (tests).
        retry_mid_stream: re-run a turn whose stream was cut after output began (dropped,
            or ended early without a finish reason or ``[DONE]``).
        retry_protocol_errors: also retry malformed or unfinished streams.
        failover: send the retry to another healthy replica when there is one.
        give_up_after_s: while every replica is down (each one's circuit breaker open or
            judging it failing), the longest a turn keeps retrying, counted from its
            first attempt: a wait that would end later is not taken — the turn fails at
            once with ``AllReplicasDown`` — and a wait chosen before the fleet went down
            is cut short then (or when it goes down, if that is later), for one last
            attempt. ``None``: only ``max_attempts``
            bounds it. At most 1e9 s.
    """

    max_attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 300.0
    jitter: bool = True
    retry_mid_stream: bool = True
    retry_protocol_errors: bool = False
    failover: bool = True
    give_up_after_s: float | None = 120.0

    def __post_init__(self) -> None:
        check_count(self.max_attempts, "RetryPolicy.max_attempts")
        # A switch given "no" or "false" was read by its truth: the feature turned on.
        for flag in ("jitter", "retry_mid_stream", "retry_protocol_errors", "failover"):
            check_flag(getattr(self, flag), f"RetryPolicy.{flag}")
        # Every wait has a finite bound, at most MAX_TIMEOUT_S (~31 years): a wait is
        # counted in int nanoseconds, and 1e300 s overflowed at the first retry.
        for name in ("backoff_s", "max_backoff_s", "max_retry_after_s"):
            check_seconds(getattr(self, name), f"RetryPolicy.{name}", 0.0, MAX_TIMEOUT_S)
        g = self.give_up_after_s
        if g is not None and not (_number(g) and 0 < g <= MAX_TIMEOUT_S):
            raise ConfigError(
                "RetryPolicy.give_up_after_s must be a finite number of seconds in "
                f"(0, {MAX_TIMEOUT_S:g}], or None (no limit), got {shown(g)}"
            )

    def retryable(self, exc: BaseException) -> bool:
        """Whether a turn that failed with ``exc`` may be sent again."""
        if isinstance(exc, StreamInterrupted):
            return self.retry_mid_stream
        if isinstance(exc, StreamProtocolError):
            return self.retry_mid_stream if exc.unfinished else self.retry_protocol_errors
        if isinstance(exc, ConnectError | StreamTimeout | RateLimitError):
            return True
        if isinstance(exc, APIStatusError):
            return exc.status in _RETRY_STATUS
        return False

    @staticmethod
    def blames_replica(exc: BaseException) -> bool:
        """Whether ``exc`` counts against the replica's health (its circuit breaker).

        A 429, a 408 or another 4xx is the replica working as designed; everything else
        on the wire is the replica (or the path to it) failing.
        """
        if isinstance(exc, RateLimitError | BadRequestError):
            return False
        return isinstance(
            exc,
            ConnectError | ServerError | StreamInterrupted | StreamTimeout | StreamProtocolError,
        ) or (isinstance(exc, APIStatusError) and exc.status >= 500)

    def wait_s(self, state: RetryCallState, *, elsewhere: bool = False) -> float:
        """Seconds to wait before the next attempt (a tenacity ``wait``).

        ``elsewhere``: with ``failover``, the retry can go to another healthy replica.
        A ``Retry-After`` speaks for the replica that sent it, so it is then not waited
        out (the router avoids that replica until then): the usual backoff is.
        """
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if (
            isinstance(exc, APIStatusError)
            and exc.retry_after is not None
            and not (elsewhere and self.failover)
        ):
            return min(max(exc.retry_after, 0.0), self.max_retry_after_s)
        backoff = (
            wait_random_exponential(multiplier=self.backoff_s, max=self.max_backoff_s)
            if self.jitter
            else wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s)
        )
        return float(backoff(state))

    def retrying(
        self,
        *,
        sleep: Callable[[float], Awaitable[None]],
        before_sleep: Callable[[RetryCallState], None] | None = None,
        stop: Callable[[RetryCallState], bool] | None = None,
        elsewhere: Callable[[], bool] | None = None,
    ) -> AsyncRetrying:
        """A tenacity ``AsyncRetrying`` for one turn, sleeping with ``sleep``.

        ``stop`` is asked too (after the wait is chosen, before it is taken): ``True``
        gives up with the last error. ``elsewhere`` says, when a wait is chosen, whether
        the retry can fail over to another healthy replica (see :meth:`wait_s`).
        """
        attempts = stop_after_attempt(self.max_attempts)
        stops: Callable[[RetryCallState], bool] = (
            attempts if stop is None else lambda state: attempts(state) or stop(state)
        )
        return AsyncRetrying(
            retry=retry_if_exception(self.retryable),
            stop=stops,
            wait=self.wait_s
            if elsewhere is None
            else lambda state: self.wait_s(state, elsewhere=elsewhere()),
            sleep=sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
