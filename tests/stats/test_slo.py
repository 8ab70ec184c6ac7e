"""SLO bounds: what they accept, and what meeting them means at the edges."""

from __future__ import annotations

import math

import pytest

from agentflow import ConfigError
from agentflow.stats import SLO


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -1.0, True, "2"])
@pytest.mark.parametrize("key", ["ttft_s", "tpot_s", "e2e_s", "queue_wait_s", "itl_max_s"])
def test_a_bound_is_a_finite_number_above_zero(key: str, value: object) -> None:
    """Infinity would reach settings.slos and goodput bounds as non-JSON ``Infinity``."""
    with pytest.raises(ConfigError, match=rf"SLO {key} must be a finite number > 0, got"):
        SLO(**{key: value})  # type: ignore[arg-type]
