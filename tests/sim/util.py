"""Helpers shared by the simulator tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from agentflow.sim import Engine, EngineRequest, Profile, get_profile

TINY = get_profile("cpu-tiny")


def tokens(seed: int, n: int) -> list[int]:
    """``n`` token ids that differ from any other ``seed``'s (ids ≥ 16: no special tokens)."""
    return [16 + (seed * 7919 + i * 104729) % 1_000_000 for i in range(n)]


def request(
    prompt: Sequence[int], n_out: int, *, max_tokens: int | None = None, out_seed: int = 0
) -> EngineRequest:
    """A request with ``n_out`` planned output tokens (the last is the end token)."""
    return EngineRequest(
        prompt_ids=list(prompt), output_ids=tokens(10_000 + out_seed, n_out), max_tokens=max_tokens
    )


def tiny(**changes: object) -> Profile:
    """cpu-tiny with some fields changed."""
    return dataclasses.replace(TINY, **changes)  # type: ignore[arg-type]


def run(engine: Engine) -> int:
    """Step until idle; the number of steps."""
    return engine.run_until_idle(max_steps=1_000_000)
