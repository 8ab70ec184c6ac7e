"""Scheduling settings a run cannot work with are a ConfigError naming the setting, made
when they are: an infinite burst used to stall the dispatcher for ever (a NaN drain
rate), an infinite or NaN priority boost or SLO scrambled the queue (NaN ranks), NaN
turned fairness off, an infinite backoff or Retry-After cap allowed an endless wait, and
a bool or a fraction passed for a count."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from agentflow import ConfigError, Limits, RetryPolicy
from agentflow.sched import Deadline, FairShare, Priority

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
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_setting_no_run_can_work_with_is_a_config_error_naming_it(case: str) -> None:
    make, name = BAD[case]
    with pytest.raises(ConfigError, match=name):
        make()


def test_the_finite_edges_are_accepted() -> None:
    Limits(max_in_flight=1, rpm=0.5, tpm=1e9, kv_tokens=1, burst_s=0.01)
    Priority(boost_s=0)
    Deadline(default_slo_s=0, slo_s={"batch": 3600})
    FairShare(1e-3)
    RetryPolicy(backoff_s=0, max_backoff_s=0, max_retry_after_s=0)
