"""What a :class:`~agentflow.Fleet` run returns: :class:`FleetResult`, with a
:class:`ReplicaStats` per replica. The fleet itself is in ``_fleet.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentflow._event_bus import CallbackFailure
from agentflow._session_types import SessionResult
from agentflow.sched import ReplicaState

__all__ = ["FleetResult", "ReplicaStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStats:
    """What one replica did during a run.

    Attributes:
        name: the replica.
        served: requests that finished on it.
        failures: requests that failed on it in a way that blames it.
        rejected: requests it answered with an error that does not blame it (a 429,
            another 4xx): neither served nor failures; its breaker counts them as
            answers.
        peak_in_flight: the most requests it streamed at once.
        breaker_opened: how many times its circuit breaker took it out of rotation.
        breaker_held: how many times its breaker would have opened but was held closed,
            being the last closed one (the router would have had nowhere to send).
    """

    name: str
    served: int
    failures: int
    peak_in_flight: int
    breaker_opened: int
    breaker_held: int = 0
    rejected: int = 0

    @classmethod
    def of(cls, state: ReplicaState) -> ReplicaStats:
        """Read a replica's run-time state."""
        return cls(
            name=state.name,
            served=state.served,
            failures=state.failures,
            peak_in_flight=state.peak_in_flight,
            breaker_opened=state.breaker.opened,
            breaker_held=state.breaker.held,
            rejected=state.rejected,
        )


@dataclass(slots=True, kw_only=True)
class FleetResult:
    """Every session's result, in the order the sessions were given.

    Attributes:
        sessions: one :class:`SessionResult` per session; a session that handed its
            place on to others when it ended (each slot of an ``agentflow.bench``
            concurrency level) is followed by theirs, in the order they ran.
        wall_s: wall time of the run.
        peak_in_flight: the most model requests that were in flight at once.
        callback_errors: callbacks that raised, with the event each was handling: each
            callback's first ``CALLBACK_FAILURES_KEPT`` (10) failures (only the first
            keeps its traceback), and the events the end of the run could not deliver.
        callback_errors_dropped: failures of a callback after its first 10, counted but
            not kept (nor logged, nor reported by an ``ErrorEvent``).
        retries: attempts that failed and were sent again.
        replicas: per replica: served, failed, rejected, peak in flight, breaker trips
            (of a resumed run: its last attempt's; a run store keeps none).
        run_id: the run's id in the fleet's store (``None`` without a store).
        start_ns: the run's start on the fleet's clock (its ``FleetStartEvent``'s
            ``start_ns``): with ``wall_s``, when it ran. ``None`` when not known (a
            resumed run, whose sessions span several attempts; a run read back from a
            run store).
    """

    sessions: list[SessionResult]
    wall_s: float
    peak_in_flight: int
    callback_errors: list[CallbackFailure] = field(default_factory=list)
    callback_errors_dropped: int = 0
    retries: int = 0
    replicas: list[ReplicaStats] = field(default_factory=list)
    run_id: str | None = None
    start_ns: int | None = None

    @property
    def output_tokens(self) -> int:
        """Output tokens over every turn of every session."""
        return sum(s.output_tokens for s in self.sessions)

    @property
    def output_tps(self) -> float:
        """Fleet throughput: output tokens / wall time of the run."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def failed(self) -> list[SessionResult]:
        """Sessions that did not reach a final answer."""
        return [s for s in self.sessions if not s.ok]
