"""Profiles: the registry, validation, and the calibration of the step-time model."""

from __future__ import annotations

import dataclasses
import math

import pytest

from agentflow import ConfigError
from agentflow.sim import PROFILES, Profile, UnknownProfileError, get_profile, profile_names

from .util import TINY

REQUIRED = {"deepseek-v4.1-flash-gb300", "deepseek-v4-gb300", "qwen2.5-coder-32b", "cpu-tiny"}


def test_registry_has_the_issue_profiles() -> None:
    assert set(profile_names()) >= REQUIRED
    for name in REQUIRED:
        p = get_profile(name)
        assert p.name == name and p.block_size == 16 and p.sources


def test_unknown_profile_lists_the_known_names() -> None:
    with pytest.raises(UnknownProfileError) as err:
        get_profile("gpt-9")
    message = str(err.value)
    assert "gpt-9" in message
    for name in REQUIRED:
        assert name in message
    assert isinstance(err.value, KeyError)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_one_sequence_decodes_at_the_stated_speed(name: str) -> None:
    p = get_profile(name)
    step = p.decode_step_s(1, p.calibration_context_tokens)
    assert step == pytest.approx(1.0 / p.per_agent_tps, rel=1e-12)
    # More sequences and more context only make a step slower.
    assert p.decode_step_s(256, 256 * 4096) > step


def test_stated_speeds_and_windows() -> None:
    flash = get_profile("deepseek-v4.1-flash-gb300")
    assert (flash.per_agent_tps, flash.max_model_len) == (848.0, 1_000_000)
    assert "third-party" in flash.sources
    assert get_profile("deepseek-v4-gb300").per_agent_tps == 596.0
    assert get_profile("deepseek-v4-gb300").max_model_len == 131_072
    assert get_profile("qwen2.5-coder-32b").per_agent_tps == 410.0
    assert TINY.kv_capacity_tokens <= 8192 and TINY.max_model_len <= 4096


def test_step_time_adds_every_term() -> None:
    p = dataclasses.replace(TINY, prefill_per_ctx_token_s=1e-9)
    t = p.step_s(3, 300, 100, 5050)
    expected = p.decode_base_s + 3e-4 + 300e-7 + 100 / p.prefill_tps + 5050e-9
    assert t == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"kv_capacity_tokens": 1000}, "cannot hold one sequence"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"decode_per_seq_s": 0.01}, "exceed the single-agent step time"),
        ({"prefill_tps": 0.0}, "prefill_tps must be a finite number > 0"),
    ],
)
def test_invalid_profiles_are_refused(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize(
    "field",
    [
        "prefill_tps",
        "per_agent_tps",
        "prefill_per_ctx_token_s",
        "decode_per_seq_s",
        "decode_per_ctx_token_s",
    ],
)
def test_an_infinite_or_nan_figure_is_refused_naming_it(field: str, value: float) -> None:
    """prefill_per_ctx_token_s=inf was accepted: the driver then slept forever and the
    engine clock read inf; a NaN made every time null."""
    with pytest.raises(ConfigError, match=f"profile 'cpu-tiny': {field} must be a finite"):
        dataclasses.replace(TINY, **{field: value})  # type: ignore[arg-type]


def test_figures_whose_step_time_overflows_are_refused() -> None:
    with pytest.raises(ConfigError, match="overflow"):
        dataclasses.replace(TINY, prefill_tps=1e-320)  # finite and > 0, yet 1/x is inf


def test_profiles_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TINY.max_num_seqs = 9  # type: ignore[misc]
    assert isinstance(TINY, Profile)
