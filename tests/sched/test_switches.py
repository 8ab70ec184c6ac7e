"""A switch (a bool setting) given anything but True or False is a ConfigError naming
the setting and the value: ``"no"``, ``"false"`` or ``None`` used to be read by its truth,
so ``RetryPolicy(failover="false")`` or ``Fleet(prefix_warmup="no")`` turned the feature ON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentflow import ConfigError, Fleet, RetryPolicy
from agentflow._counts import check_flag
from agentflow.sched import Router
from agentflow.testing import MockTransport, Reply

NO: Any = "no"
FALSE: Any = "false"
NONE: Any = None
ONE: Any = 1


def _fleet(**kw: Any) -> Fleet:
    return Fleet(MockTransport(lambda r: Reply.text("x")), **kw)


SWITCHES: dict[str, tuple[Callable[[Any], object], str]] = {
    "RetryPolicy.jitter": (lambda v: RetryPolicy(jitter=v), "RetryPolicy.jitter"),
    "RetryPolicy.failover": (lambda v: RetryPolicy(failover=v), "RetryPolicy.failover"),
    "RetryPolicy.retry_mid_stream": (
        lambda v: RetryPolicy(retry_mid_stream=v),
        "RetryPolicy.retry_mid_stream",
    ),
    "RetryPolicy.retry_protocol_errors": (
        lambda v: RetryPolicy(retry_protocol_errors=v),
        "RetryPolicy.retry_protocol_errors",
    ),
    "Router.sticky": (lambda v: Router(sticky=v), "Router.sticky"),
    "Router.prefix_affinity": (lambda v: Router(prefix_affinity=v), "Router.prefix_affinity"),
    "Router.prompt_cache_key": (lambda v: Router(prompt_cache_key=v), "Router.prompt_cache_key"),
    "Fleet.prefix_warmup": (lambda v: _fleet(prefix_warmup=v), "Fleet.prefix_warmup"),
}


@pytest.mark.parametrize("value", [NO, FALSE, NONE, ONE], ids=repr)
@pytest.mark.parametrize("field", list(SWITCHES))
def test_a_switch_that_is_not_a_bool_is_refused(field: str, value: Any) -> None:
    build, name = SWITCHES[field]
    with pytest.raises(ConfigError, match=rf"^{name} must be True or False, got {value!r}$"):
        build(value)


@pytest.mark.parametrize("field", list(SWITCHES))
def test_true_and_false_are_taken(field: str) -> None:
    build, _ = SWITCHES[field]
    build(True)
    build(False)


def test_check_flag_returns_the_bool() -> None:
    assert check_flag(False, "X.y") is False
    with pytest.raises(ConfigError, match=r"^X\.y must be True or False, got 'no'$"):
        check_flag("no", "X.y")
