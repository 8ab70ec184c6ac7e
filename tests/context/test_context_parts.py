"""A budget's and a prefix index's parts are checked when they are made: a
``ContextBudget(counter=...)``, ``calibrator=...`` or ``PrefixIndex(counter=...)`` of the
wrong kind was taken, and failed with an AttributeError at the session's first turn."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import ConfigError
from agentflow.context import (
    Calibrator,
    ContextBudget,
    MessageCounter,
    PrefixIndex,
    TiktokenCounter,
)


def bad(value: Any) -> Any:
    """``value``, typed Any: the point is what happens when a caller passes it anyway."""
    return value


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (
            lambda: ContextBudget(window=1000, counter=bad("x")),
            r"^ContextBudget\.counter must be a MessageCounter or None, got 'x'$",
        ),
        (
            lambda: ContextBudget(window=1000, counter=bad(TiktokenCounter())),
            r"^ContextBudget\.counter .* \(wrap a text counter: MessageCounter\(counter\)\)",
        ),
        (
            lambda: ContextBudget(window=1000, calibrator=bad("x")),
            r"^ContextBudget\.calibrator must be a Calibrator or None, got 'x'$",
        ),
        (
            lambda: PrefixIndex(counter=bad("x")),
            r"^PrefixIndex\.counter must be a MessageCounter or None, got 'x'$",
        ),
        (
            lambda: PrefixIndex(bad(TiktokenCounter())),
            r"^PrefixIndex\.counter .* \(wrap a text counter: MessageCounter\(counter\)\)",
        ),
    ],
)
def test_a_part_of_the_wrong_kind_is_a_config_error_naming_it(build: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        build()


def test_good_parts_still_pass() -> None:
    counter = MessageCounter(TiktokenCounter())
    budget = ContextBudget(window=1000, counter=counter, calibrator=Calibrator())
    assert budget.counter is counter and PrefixIndex(counter).counter is counter
    assert isinstance(ContextBudget(window=1000).counter, MessageCounter)
