"""One check of a count (agentflow/_counts.py), shared by the llama.cpp modules and the
simulator: an int, never a bool, in its range, the error naming the field and the value."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from agentflow import ConfigError
from agentflow._counts import check_count
from agentflow.llamacpp import check_context, check_slots
from agentflow.sim import Engine, TextGenConfig, get_profile
from agentflow.sim.driver import EngineDriver
from agentflow.sim.kv import BlockManager
from agentflow.sim.sessions import SessionRounds


def test_an_int_in_range_is_returned_anything_else_is_named() -> None:
    assert check_count(1, "n") == 1 and check_count(0, "n", 0) == 0
    assert check_count(256, "n", 1, 256) == 256
    for bad, need in [
        (0, "an int ≥ 1"),
        (True, "an int ≥ 1"),
        (2.0, "an int ≥ 1"),
        ("3", "an int ≥ 1"),
        (None, "an int ≥ 1"),
    ]:
        with pytest.raises(ConfigError) as caught:
            check_count(bad, "Thing.n")
        assert str(caught.value) == f"Thing.n must be {need}, got {bad!r}"
    with pytest.raises(ConfigError, match=r"^n must be an int in \[512, 1,048,576\], got 511$"):
        check_count(511, "n", 512, 1 << 20)
    with pytest.raises(ConfigError, match=r"^n must be an int ≥ 0, got -1$"):
        check_count(-1, "n", 0)


def test_the_llama_cpp_checks_keep_their_words() -> None:
    assert check_slots(256, "x") == 256 and check_context(512, "x") == 512
    with pytest.raises(ConfigError, match=r"^--n-parallel must be an int in \[1, 256\], got 0$"):
        check_slots(0, "--n-parallel")
    with pytest.raises(
        ConfigError, match=r"^n_ctx must be an int in \[512, 1,048,576\], got 2097152$"
    ):
        check_context(1 << 21, "n_ctx")


TINY = get_profile("cpu-tiny")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        # Each was accepted: a bool or a float passed `value < 1` (or `< 0`).
        (lambda: dataclasses.replace(TINY, max_num_seqs=True), "'cpu-tiny': max_num_seqs"),
        (
            lambda: dataclasses.replace(TINY, calibration_context_tokens=0.5),  # type: ignore[arg-type]
            "'cpu-tiny': calibration_context_tokens",
        ),
        (lambda: EngineDriver(Engine(TINY), tokens_per_chunk=1.5), "tokens_per_chunk"),  # type: ignore[arg-type]
        (lambda: EngineDriver(Engine(TINY), keep_records=True), "keep_records"),
        (lambda: BlockManager(8, 2.5), "block_size"),  # type: ignore[arg-type]
        (lambda: SessionRounds(max_rounds=2.5), "max_rounds"),  # type: ignore[arg-type]
        (lambda: TextGenConfig(tool_rounds=0.5), "TextGenConfig.tool_rounds"),  # type: ignore[arg-type]
    ],
)
def test_the_simulators_counts_refuse_bools_and_floats(make: Callable[[], Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        make()
