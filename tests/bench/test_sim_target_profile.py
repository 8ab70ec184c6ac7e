"""``SimTarget.profile`` is a profile name or a ``Profile``, checked when the target is
made. It was typed ``Any`` and unchecked: ``SimTarget(profile=42)`` was made and failed
later, in ``label`` or the first level run, with an AttributeError."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow import ConfigError
from agentflow.bench import SimTarget
from agentflow.sim import get_profile


@pytest.mark.parametrize("wrong", [42, None, ["cpu-tiny"]])
def test_a_profile_that_is_neither_a_name_nor_a_profile_fails_when_made(wrong: Any) -> None:
    with pytest.raises(ConfigError, match=r"SimTarget\.profile must be a profile name or an"):
        SimTarget(profile=wrong)


def test_an_unknown_name_fails_when_made_listing_the_names() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown simulator profile 'no-such'; known: .*cpu-tiny"
    ):
        SimTarget(profile="no-such")


async def test_a_name_or_a_profile_is_taken() -> None:
    by_name = SimTarget(profile="cpu-tiny")
    by_profile = SimTarget(profile=get_profile("cpu-tiny"))
    assert by_name.label == by_profile.label == "sim://cpu-tiny (in-process, virtual time)"
    assert await by_name.model_name() == await by_profile.model_name()
