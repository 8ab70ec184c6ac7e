"""Scheduling settings a run cannot work with are a ConfigError naming the setting, made
when they are: an infinite burst used to stall the dispatcher for ever (a NaN drain
rate; so did a finite rate and burst whose bucket overflowed), an infinite or NaN priority
boost or SLO (or a finite one whose nanoseconds overflowed) scrambled the queue (NaN ranks), NaN
turned fairness off, an infinite backoff or Retry-After cap allowed an endless wait, a
bool or a fraction passed for a count (a string, None or a bool for a number of seconds
or a weight: a bare TypeError, or taken), a Fleet's transport, policy, limits, router or
retry of the wrong kind was taken and failed later (a Replica's limits and name too), and a
Replica's breaker settings were checked only when a run built the breaker (a cooldown over
60 s failed every run)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest

from agentflow import Agent, ConfigError, Fleet, Limits, Replica, RetryEvent, RetryPolicy
from agentflow.embedded import run_virtual
from agentflow.sched import PLAS, Deadline, FairShare, Priority, ReplicaState
from agentflow.testing import MockTransport, Reply, ScriptedServer, capture_events
from agentflow.transport import HTTPTransport
from tests.sched.conftest import FakeClock, IdleTransport

BAD: dict[str, tuple[Callable[[], object], str]] = {
    "burst inf": (lambda: Limits(rpm=60, burst_s=math.inf), "Limits.burst_s"),
    "burst nan": (lambda: Limits(rpm=60, burst_s=math.nan), "Limits.burst_s"),
    "rpm inf": (lambda: Limits(rpm=math.inf), "Limits.rpm"),
    "tpm nan": (lambda: Limits(tpm=math.nan), "Limits.tpm"),
    "in flight bool": (lambda: Limits(max_in_flight=True), "Limits.max_in_flight"),
    "kv fraction": (lambda: Limits(kv_tokens=1.5), "Limits.kv_tokens"),  # type: ignore[arg-type]
    "boost inf": (lambda: Priority(boost_s=math.inf), "Priority boost_s"),
    "boost nan": (lambda: Priority(boost_s=math.nan), "Priority boost_s"),
    "slo nan": (lambda: Deadline(default_slo_s=math.nan), "'default_slo_s'"),
    "agent slo inf": (lambda: Deadline(slo_s={"chat": math.inf}), "'chat'"),
    "quantum nan": (lambda: FairShare(math.nan), "FairShare quantum_s"),
    "backoff inf": (lambda: RetryPolicy(backoff_s=math.inf), "RetryPolicy.backoff_s"),
    "retry-after cap inf": (
        lambda: RetryPolicy(max_retry_after_s=math.inf),
        "RetryPolicy.max_retry_after_s",
    ),
    # Each finite, but what the run computes from them is not: a bucket of inf tokens
    # draining at NaN a second (the run never ended), a drain time of inf, inf ns of
    # boost (priority-0 tickets ranked 0 × inf = NaN), of SLO or of quantum.
    "bucket overflows": (lambda: Limits(tpm=1e200, burst_s=1e200), "Limits.tpm"),
    "drain underflows": (lambda: Limits(rpm=1e-320), "Limits.rpm"),
    "boost ns overflow": (lambda: Priority(boost_s=1e300), "Priority boost_s"),
    # A wait is counted in int nanoseconds: these overflowed at the first retry.
    "backoff ns overflow": (
        lambda: RetryPolicy(backoff_s=1e300, max_backoff_s=1e300),
        r"RetryPolicy\.backoff_s must be a finite number of seconds in \[0, 1e\+09\], got 1e\+300",
    ),
    "max backoff ns overflow": (lambda: RetryPolicy(max_backoff_s=1e10), "max_backoff_s"),
    "retry-after cap overflow": (lambda: RetryPolicy(max_retry_after_s=1e300), "max_retry_"),
    "give up ns overflow": (lambda: RetryPolicy(give_up_after_s=1e300), "give_up_after_s"),
    # Refused only once the run started (docs/scheduling.md: when the fleet is built).
    "fleet kv_tokens": (
        lambda: Fleet(IdleTransport(), limits=Limits(kv_tokens=1000)),
        "Limits.kv_tokens is a budget per server",
    ),
    # Finite for one level, inf for the highest (its tickets all ranked -inf).
    "top boost overflow": (lambda: Priority(boost_s=1e299), "the largest priority"),
    # A priority huge or a bool: a bare OverflowError at every turn under Priority, or
    # taken as a class (True).
    "priority huge": (lambda: Agent(name="a", model="m", priority=10**400), "priority must be"),
    # (its repr, past 4,300 digits, raised a ValueError instead of the message)
    "priority vast": (lambda: Agent(name="a", model="m", priority=10**5000), "an int of 16610"),
    "priority bool": (lambda: Agent(name="a", model="m", priority=True), "priority must be"),
    "priority over": (lambda: Agent(name="a", model="m", priority=-(2**31)), "priority must be"),
    "slo ns overflow": (lambda: Deadline(default_slo_s=1e300), "'default_slo_s'"),
    "agent slo ns overflow": (lambda: Deadline(slo_s={"chat": 1e300}), "'chat'"),
    "quantum ns overflow": (lambda: FairShare(1e300), "FairShare quantum_s"),
    # A string, None or a bool used to be a bare TypeError, or accepted (a bool).
    "backoff str": (lambda: RetryPolicy(backoff_s="0.5"), "RetryPolicy.backoff_s"),  # type: ignore[arg-type]
    "backoff bool": (lambda: RetryPolicy(backoff_s=True), "RetryPolicy.backoff_s"),
    "retry-after cap None": (
        lambda: RetryPolicy(max_retry_after_s=None),  # type: ignore[arg-type]
        "RetryPolicy.max_retry_after_s",
    ),
    "give up str": (lambda: RetryPolicy(give_up_after_s="60"), "RetryPolicy.give_up_after_s"),  # type: ignore[arg-type]
    "give up bool": (lambda: RetryPolicy(give_up_after_s=True), "RetryPolicy.give_up_after_s"),
    "plas weight str": (lambda: PLAS(weight="10"), "PLAS weight"),  # type: ignore[arg-type]
    "plas weight bool": (lambda: PLAS(weight=True), "PLAS weight"),
    "plas weight nan": (lambda: PLAS(weight=math.nan), "PLAS weight"),
    "boost str": (lambda: Priority(boost_s="30"), "Priority boost_s"),  # type: ignore[arg-type]
    "quantum str": (lambda: FairShare("0.1"), "FairShare quantum_s"),  # type: ignore[arg-type]
    "quantum bool": (lambda: FairShare(True), "FairShare quantum_s"),
    "agent slo str": (lambda: Deadline(slo_s={"chat": "0.5"}), "'chat'"),  # type: ignore[dict-item]
    "slo None": (lambda: Deadline(default_slo_s=None), "'default_slo_s'"),  # type: ignore[arg-type]
    "slo not a mapping": (lambda: Deadline(slo_s=[("chat", 0.5)]), "Deadline slo_s"),  # type: ignore[arg-type]
    # Fleet's parts of the wrong kind used to fail later, or not at all: a URL string
    # was split into one replica per character, a generator or None failed the run with
    # an AttributeError, a dict for limits or router with an AttributeError (the
    # router's when the first session ended), policy=123 failed every session, and
    # retry="default" was taken.
    "fleet url": (lambda: Fleet("http://127.0.0.1:8000/v1"), "Fleet.transport.*HTTPTransport"),  # type: ignore[arg-type]
    "fleet generator": (lambda: Fleet(t for t in [IdleTransport()]), "Fleet.transport"),  # type: ignore[arg-type]
    "fleet None": (lambda: Fleet(None), "Fleet.transport"),  # type: ignore[arg-type]
    "fleet list with a url": (lambda: Fleet([IdleTransport(), "http://h/v1"]), "Fleet.transport"),  # type: ignore[list-item]
    "replica url": (lambda: Replica(transport="http://h/v1"), "Replica.transport"),  # type: ignore[arg-type]
    # A dict of limits failed with an AttributeError when the run started; a name of 5
    # with a TypeError there, and a list was taken.
    "replica limits dict": (
        lambda: Replica(transport=IdleTransport(), limits={"max_in_flight": 1}),  # type: ignore[arg-type]
        r"Replica\.limits must be a Limits, got \{'max_in_flight': 1\}",
    ),
    "replica name int": (
        lambda: Replica(transport=IdleTransport(), name=5),  # type: ignore[arg-type]
        r"Replica\.name must be a str .*got 5$",
    ),
    "replica name list": (
        lambda: Replica(transport=IdleTransport(), name=[1]),  # type: ignore[arg-type]
        r"Replica\.name must be a str .*got \[1\]$",
    ),
    "fleet policy int": (lambda: Fleet(IdleTransport(), policy=123), "Fleet.policy"),  # type: ignore[arg-type]
    "fleet policy class": (lambda: Fleet(IdleTransport(), policy=PLAS), "Fleet.policy.*PLAS()"),  # type: ignore[arg-type]
    "fleet limits dict": (lambda: Fleet(IdleTransport(), limits={"rpm": 60}), "Fleet.limits"),  # type: ignore[arg-type]
    "fleet router dict": (lambda: Fleet(IdleTransport(), router={"sticky": False}), "Fleet.router"),  # type: ignore[arg-type]
    "fleet retry str": (lambda: Fleet(IdleTransport(), retry="default"), "Fleet.retry"),  # type: ignore[arg-type]
    "breaker threshold 0": (
        lambda: Replica(transport=IdleTransport(), breaker_threshold=0),
        "Replica.breaker_threshold",
    ),
    "breaker window bool": (
        lambda: Replica(transport=IdleTransport(), breaker_window=True),
        "Replica.breaker_window",
    ),
    "breaker rate 0": (
        lambda: Replica(transport=IdleTransport(), breaker_failure_rate=0.0),
        "Replica.breaker_failure_rate",
    ),
    "breaker cooldown nan": (
        lambda: Replica(transport=IdleTransport(), breaker_cooldown_s=math.nan),
        "Replica.breaker_cooldown_s",
    ),
    "breaker cooldown inf": (
        lambda: Replica(transport=IdleTransport(), breaker_cooldown_s=math.inf),
        "Replica.breaker_cooldown_s",
    ),
    "breaker max below cooldown": (
        lambda: Replica(
            transport=IdleTransport(), breaker_cooldown_s=120.0, breaker_max_cooldown_s=60.0
        ),
        "Replica.breaker_max_cooldown_s",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_setting_no_run_can_work_with_is_a_config_error_naming_it(case: str) -> None:
    make, name = BAD[case]
    with pytest.raises(ConfigError, match=name):
        make()


def test_a_fleet_takes_its_parts_of_the_right_kind() -> None:
    """Transports (one, or a list with Replicas), a policy by name, function or object,
    and each part left to its default."""
    one, two = IdleTransport("idle://1"), IdleTransport("idle://2")
    assert len(Fleet(one).replicas) == 1
    assert len(Fleet((one, Replica(transport=two))).replicas) == 2
    for policy in ("fair", PLAS(), lambda t, s, /: 0.0):
        Fleet(one, policy=policy, limits=None, router=None, retry=None)


def test_the_finite_edges_are_accepted() -> None:
    Limits(max_in_flight=1, rpm=0.5, tpm=1e9, kv_tokens=1, burst_s=0.01)
    Priority(boost_s=0)
    Priority(boost_s=1e289)  # 1e298 ns, × the largest priority: finite
    Agent(name="a", model="m", priority=2**31 - 1)
    Agent(name="a", model="m", priority=-(2**31 - 1))
    Limits(rpm=1e-300, tpm=1e300, burst_s=1e5)
    Deadline(default_slo_s=0, slo_s={"batch": 3600})
    FairShare(1e-3)
    RetryPolicy(backoff_s=0, max_backoff_s=0, max_retry_after_s=0)


def test_the_longest_retry_wait_is_taken() -> None:
    """At its bound (1e9 s) a backoff is waited (virtual time, cut short after a minute
    here), and a give-up limit as long counts it: 1e300 s failed the turn with a bare
    OverflowError at the first retry."""
    policy = RetryPolicy(backoff_s=1e9, max_backoff_s=1e9, give_up_after_s=1e9, jitter=False)
    busy = MockTransport(lambda request: Reply(status=503, frames=[b"busy"]))
    retries = capture_events("retry")
    run = Fleet(busy, retry=policy, callbacks=[retries]).run(
        [Agent(name="a", model="m").session("x")]
    )
    with pytest.raises(TimeoutError):
        run_virtual(asyncio.wait_for(run, 60.0))
    (retry,) = retries.of_type("retry")
    assert isinstance(retry, RetryEvent) and retry.attempt.wait_s == 1e9
    assert len(busy.requests) == 1


async def test_a_breaker_cooldown_over_60_s_is_a_longer_maximum_not_a_failed_run() -> None:
    """A cooldown longer than the breaker's default cap (60 s) used to be accepted by
    Replica and fail every run when the breaker was built; it now raises the cap."""
    replica = Replica(transport=IdleTransport(), breaker_cooldown_s=120.0)
    assert replica.max_cooldown_s == 120.0
    assert Replica(transport=IdleTransport()).max_cooldown_s == 60.0
    longer = Replica(transport=IdleTransport(), breaker_max_cooldown_s=600.0)
    breaker = ReplicaState(longer, FakeClock()).breaker
    breaker.threshold = 1
    for _ in range(10):  # open, then every probe fails: 5 s doubling, up to 600 s
        breaker.on_failure(probe=True)
    assert breaker.opens_in_ns() == 600 * 1_000_000_000
    async with (
        ScriptedServer([Reply.text("ok")]) as srv,
        HTTPTransport(srv.base_url) as http,
    ):
        slow_probe = Replica(transport=http, breaker_cooldown_s=120.0)
        result = await Fleet(slow_probe, probe_slots=False).run(
            [Agent(name="a", model="m").session("hi")]
        )
    assert not result.failed


def test_the_retry_waits_are_documented_as_they_are_checked() -> None:
    """docs/scheduling.md said each of the four waits is a finite number of seconds of at
    most 1e9; ``give_up_after_s`` may be ``None``, and must be above 0."""
    from pathlib import Path

    doc = " ".join((Path(__file__).parents[2] / "docs" / "scheduling.md").read_text().split())
    assert "`give_up_after_s` is one above 0 and at most 1e9, or `None` (no limit)" in doc
    assert "`backoff_s`, `max_backoff_s` and `max_retry_after_s` are each a finite" in doc
    RetryPolicy(give_up_after_s=None, backoff_s=0, max_backoff_s=0, max_retry_after_s=0)
    RetryPolicy(give_up_after_s=1e9, backoff_s=1e9, max_backoff_s=1e9, max_retry_after_s=1e9)
    with pytest.raises(ConfigError, match="give_up_after_s"):
        RetryPolicy(give_up_after_s=0)
