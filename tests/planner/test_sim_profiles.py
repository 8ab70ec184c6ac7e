"""The simulator's deployment profiles take their KV capacity from the planner."""

from __future__ import annotations

import pytest

from agentflow.planner import get_deployment, plan
from agentflow.sim import get_profile


@pytest.mark.parametrize(
    ("profile", "deployment"),
    [
        ("deepseek-v4.1-flash-gb300", "deepseek-v4.1-flash-gb300"),
        ("deepseek-v4-gb300", "deepseek-v4-gb300"),
        ("qwen2.5-coder-32b", "qwen2.5-coder-32b-gb300-tp8"),
    ],
)
def test_profile_kv_capacity_is_the_planned_one(profile: str, deployment: str) -> None:
    p = get_profile(profile)
    planned = plan(get_deployment(deployment))
    assert p.kv_capacity_tokens == planned.kv_tokens_total
    assert p.kv_capacity_tokens % p.block_size == 0
    assert f"{planned.kv_tokens_total:,} tokens" in p.sources
    assert "agentflow.planner" in p.sources
