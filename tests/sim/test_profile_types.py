"""A profile's timing figures must be numbers: a string or None escaped as a TypeError from a
comparison, without the field's name, and a bool was taken as 1 or 0."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow.sim import get_profile

TINY = get_profile("cpu-tiny")
FIGURES = (
    "prefill_tps",
    "per_agent_tps",
    "prefill_per_ctx_token_s",
    "decode_per_seq_s",
    "decode_per_ctx_token_s",
)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("1000", "'1000'"), (None, "None"), (True, "True"), (10**400, "an int of 1329 bits")],
    ids=["str", "None", "bool", "huge-int"],
)
@pytest.mark.parametrize("field", FIGURES)
def test_a_figure_that_is_not_a_number_is_refused_naming_it(
    field: str, value: object, shown: str
) -> None:
    changes: dict[str, Any] = {field: value}
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(TINY, **changes)
    message = str(err.value)
    assert message.startswith(f"profile 'cpu-tiny': {field} must be a finite number"), message
    assert message.endswith(f"got {shown}"), message


def test_ints_are_still_numbers() -> None:
    p = dataclasses.replace(TINY, prefill_tps=1000, decode_per_seq_s=0)
    assert p.prefill_tps == 1000 and p.decode_step_s(1, 1) > 0
