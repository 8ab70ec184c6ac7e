"""Replicas: the endpoints a fleet sends to, each with its own limits and health."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentflow._errors import ConfigError, TransportError
from agentflow._redact import display_url, redact
from agentflow.sched._breaker import CircuitBreaker, check_breaker_values
from agentflow.sched._carry import Carry, Hold
from agentflow.sched._limits import Limits, RateGate
from agentflow.sched._ticket import Ticket
from agentflow.typing import Clock, Transport

__all__ = ["Replica", "ReplicaState", "check_transport"]

#: The breaker's longest cooldown by default (CircuitBreaker's ``max_cooldown_s``).
_MAX_COOLDOWN_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Replica:
    """One server replica a fleet may send turns to.

    Args:
        transport: how to reach it.
        limits: its own caps (requests in flight, RPM, TPM, KV tokens in flight).
        name: a label for routing decisions and reports; defaults to the transport's endpoint
            (a URL's userinfo and any registered secret are never part of it).
        breaker_threshold: failures among its last ``breaker_window`` outcomes before its
            circuit breaker may take it out of rotation.
        breaker_failure_rate: the share of its last ``breaker_window`` outcomes that must
            be failures for the breaker to open.
        breaker_window: how many of its most recent outcomes the breaker judges.
        breaker_cooldown_s: how long it stays out before one probe request is let through.
        breaker_max_cooldown_s: the longest the cooldown grows to as probes fail (it
            doubles each time); ``None``: 60 s, or ``breaker_cooldown_s`` if longer.
        prefix_shared_at: when a prefix the server just prefilled can be reused by other
            requests, which the prefix warm-up waits for: ``"first_token"`` (vLLM,
            SGLang: the prefill's KV blocks are shared as soon as they are computed) or
            ``"end"`` (llama.cpp: a prefix is cached in the slot that computed it, reused
            by a request that comes once that slot is free — so set ``"end"`` for a
            llama.cpp server).

    The breaker settings are checked here (a ``ConfigError`` naming the field), not
    when a run builds the breaker.

    The breaker of the last replica whose breaker is closed never opens (the router
    would have nowhere to send); see :class:`~agentflow.sched.CircuitBreaker`.
    """

    transport: Transport
    limits: Limits = field(default_factory=Limits)
    name: str = ""
    breaker_threshold: int = 5
    breaker_failure_rate: float = 0.5
    breaker_window: int = 20
    breaker_cooldown_s: float = 5.0
    breaker_max_cooldown_s: float | None = None
    prefix_shared_at: Literal["first_token", "end"] = "first_token"

    def __post_init__(self) -> None:
        check_transport(self.transport, "Replica.transport")
        if self.prefix_shared_at not in ("first_token", "end"):
            raise ConfigError(
                "Replica.prefix_shared_at must be 'first_token' (vLLM, SGLang) or 'end' "
                f"(llama.cpp), got {self.prefix_shared_at!r:.80}"
            )
        # (A dict of limits failed with an AttributeError when a run started; a name
        # not a str with a TypeError there, or was shown as a list in reports.)
        if not isinstance(self.limits, Limits):
            raise ConfigError(f"Replica.limits must be a Limits, got {self.limits!r:.80}")
        if not isinstance(self.name, str):
            raise ConfigError(
                f"Replica.name must be a str ('': the transport's endpoint), got {self.name!r:.80}"
            )
        # The checks the breaker makes when a run builds it: refused here, not then.
        check_breaker_values(
            "Replica.breaker_",
            threshold=self.breaker_threshold,
            failure_rate=self.breaker_failure_rate,
            window=self.breaker_window,
            cooldown_s=self.breaker_cooldown_s,
            max_cooldown_s=self.breaker_max_cooldown_s,
        )
        cooldown, most = self.breaker_cooldown_s, self.breaker_max_cooldown_s
        if most is not None and not cooldown <= most:
            raise ConfigError(
                f"Replica.breaker_max_cooldown_s must be ≥ breaker_cooldown_s ({cooldown!r}), "
                f"or None (60 s, or the cooldown if longer), got {most!r}"
            )

    @property
    def max_cooldown_s(self) -> float:
        """The breaker's longest cooldown: ``breaker_max_cooldown_s``, or by default
        60 s (or ``breaker_cooldown_s`` if longer)."""
        most = self.breaker_max_cooldown_s
        return most if most is not None else max(_MAX_COOLDOWN_S, self.breaker_cooldown_s)


class ReplicaState:
    """A replica at run time: what is in flight on it, its rate buckets and its breaker.

    Its rate buckets (and the token debt they are owed) and its ``Retry-After`` hold
    come from ``carry`` when given (a fleet's, kept across its runs); else they are new.
    """

    __slots__ = (
        "_clock",
        "avoid_until",
        "breaker",
        "failures",
        "hold",
        "in_flight",
        "last_error",
        "limits",
        "name",
        "peak_in_flight",
        "rates",
        "rejected",
        "served",
        "sessions",
        "shares_at_end",
        "tokens_in_flight",
        "transport",
    )

    def __init__(self, replica: Replica, clock: Clock, carry: Carry | None = None) -> None:
        self.name = redact(display_url(replica.name or replica.transport.endpoint))
        self.transport = replica.transport
        self.limits = replica.limits
        self.rates: RateGate | None
        if carry is not None:
            self.rates, self.hold = carry.replica(self.name, replica.limits)
        else:
            self.rates, self.hold = replica.limits.gate(), Hold()
        self.breaker = CircuitBreaker(
            clock,
            threshold=replica.breaker_threshold,
            failure_rate=replica.breaker_failure_rate,
            window=replica.breaker_window,
            cooldown_s=replica.breaker_cooldown_s,
            max_cooldown_s=replica.max_cooldown_s,
        )
        #: Requests streaming on it now.
        self.in_flight = 0
        #: The most that ever streamed on it at once.
        self.peak_in_flight = 0
        #: Prompt + max output tokens of the requests in flight.
        self.tokens_in_flight = 0
        #: Sessions routed here (sticky), now.
        self.sessions = 0
        #: Requests it finished; requests it answered with an error that does not blame
        #: it (a 429, another 4xx); requests that failed on it in a way that does.
        self.served = 0
        self.rejected = 0
        self.failures = 0
        #: The last error that blamed it (kept after later successes).
        self.last_error: TransportError | None = None
        #: A prefix prefilled here is reused only once the request that prefilled it
        #: ended (``Replica.prefix_shared_at="end"``: llama.cpp), not at its first token.
        self.shares_at_end = replica.prefix_shared_at == "end"
        #: Prefixes whose leader it failed or kept past the warm-up timeout, and until
        #: when (clock ns) the router sends their tickets elsewhere while another replica
        #: has room. See :meth:`avoids`.
        self.avoid_until: dict[str, int] = {}
        self._clock = clock

    def has_room(self, ticket: Ticket) -> bool:
        """Whether ``ticket`` could start here now: it :meth:`fits`, and the replica's
        RPM/TPM buckets can take it without waiting — its whole charge, or, for one
        bigger than the bucket, an empty bucket it then overdraws (a replica out of
        rate is skipped, never waited on: :meth:`RateGate.charge_now`)."""
        return self.fits(ticket) and (self.rates is None or self.rates.wait_s(ticket.tokens) == 0)

    def takes_whole(self, ticket: Ticket) -> bool:
        """Whether its RPM/TPM buckets have room for ``ticket``'s whole charge now, with
        no overdraft (the router prefers such a replica among those with room)."""
        return self.rates is None or self.rates.ready(ticket.tokens)

    def wait_s(self, ticket: Ticket) -> float | None:
        """Seconds until ``ticket`` could start here if nothing else changes (0: now);
        ``None`` when only a stream ending can make room (it does not :meth:`fit <fits>`)."""
        if not self.fits(ticket):
            return None
        return 0.0 if self.rates is None else self.rates.wait_s(ticket.tokens)

    def fits(self, ticket: Ticket) -> bool:
        """Whether ``ticket`` fits under this replica's in-flight and KV caps."""
        lim = self.limits
        if lim.max_in_flight is not None and self.in_flight >= lim.max_in_flight:
            return False
        return (
            lim.kv_tokens is None
            or self.in_flight == 0  # one request always fits, or it would never run
            or self.tokens_in_flight + ticket.tokens <= lim.kv_tokens
        )

    def avoids(self, prefix_key: str) -> bool:
        """Whether the router keeps ``prefix_key``'s tickets off this replica for now: a
        leader of that prefix failed here, or had no first token within the warm-up
        timeout (until its stream ends, and :data:`~agentflow.sched._warmups.AVOID_S`
        after; a leader that warms it here lifts it)."""
        until = self.avoid_until.get(prefix_key)
        if until is None:
            return False
        if until <= self._clock():
            del self.avoid_until[prefix_key]
            return False
        return True

    @property
    def held_until_ns(self) -> int:
        """Until when (clock ns) the router avoids it: it answered with a ``Retry-After``
        (0: no hold). See :meth:`held_ns`. Read-only: a hold is set with
        ``hold.extend(now_ns, seconds)``, which notes when it was set (what a fleet's
        next run on another clock keeps of it)."""
        return self.hold.until_ns

    def held_ns(self) -> int:
        """Nanoseconds left of the hold its last ``Retry-After`` put on it (0: none).

        While held, the router sends it nothing as long as another healthy replica
        exists, even a full one (the dispatcher wakes when the hold ends); with none,
        the held one is used. A fleet keeps the hold across its runs."""
        return self.hold.left_ns(self._clock()) if self.hold.until_ns else 0

    def start(self, ticket: Ticket) -> bool:
        """``ticket`` was dispatched here; returns whether it is the breaker's probe."""
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.tokens_in_flight += ticket.tokens
        return self.breaker.on_send()

    def finish(self, ticket: Ticket) -> None:
        """``ticket``'s stream ended (whatever the outcome)."""
        self.in_flight -= 1
        self.tokens_in_flight -= ticket.tokens

    def __repr__(self) -> str:
        return (
            f"ReplicaState({self.name!r}, in_flight={self.in_flight}, breaker={self.breaker.state})"
        )


def check_unique(states: list[ReplicaState]) -> None:
    """Replica names must be unique: routing decisions are keyed by them."""
    names = [s.name for s in states]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"replica names must be unique; repeated: {dupes} (set Replica.name)")


def check_transport(value: object, name: str) -> None:
    """Raise a :class:`ConfigError` naming ``name`` unless ``value`` is a transport: an
    object with a ``stream`` method and a string ``endpoint`` (a URL is not one)."""
    if callable(getattr(value, "stream", None)) and isinstance(
        getattr(value, "endpoint", None), str
    ):
        return
    hint = ": wrap a URL in HTTPTransport(url)" if isinstance(value, str) else ""
    raise ConfigError(
        f"{name} must be a transport (an object with stream() and an endpoint){hint}, got {value!r}"
    )
