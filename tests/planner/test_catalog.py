"""The shipped specs: the report's models, hardware and vLLM command, and name lookup."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentflow._errors import ConfigError
from agentflow.planner import (
    DEFAULT_DEPLOYMENT,
    DEPLOYMENTS,
    HARDWARE,
    MODELS,
    GQAAttention,
    MLAAttention,
    get_deployment,
    get_hardware,
    get_model,
    plan,
)


def test_the_models_of_the_report() -> None:
    flash = get_model("deepseek-v4.1-flash")
    assert (flash.active_params, flash.total_params) == (16 * 10**9, 552 * 10**9)
    assert flash.max_context == 1_000_000 and flash.layers == 61
    assert flash.attention == MLAAttention(
        kv_lora_rank=512, qk_rope_head_dim=64, attention_heads=128
    )
    assert "DeepSeek-V3's are assumed" in flash.sources
    v4 = get_model("deepseek-v4")
    assert (v4.active_params, v4.total_params, v4.max_context) == (
        37 * 10**9,
        671 * 10**9,
        131_072,
    )
    assert v4.attention == flash.attention and v4.layers == 61
    qwen = get_model("qwen2.5-coder-32b")
    assert qwen.layers == 64 and qwen.weight_dtype == "bf16"
    assert qwen.attention == GQAAttention(kv_heads=8, head_dim=128, attention_heads=40)
    assert qwen.total_params == 32_500_000_000


def test_the_hardware() -> None:
    assert (get_hardware("gb300-nvl72").gpu_memory_gib, get_hardware("gb300-nvl72").gpus) == (
        288.0,
        72,
    )
    assert get_hardware("hgx-h200").gpu_memory_gib == 141.0
    assert get_hardware("hgx-h100").gpu_memory_gib == 80.0


def test_the_seed_command_is_the_default_deployment() -> None:
    d = get_deployment(DEFAULT_DEPLOYMENT)
    assert d.model.name == "deepseek-v4.1-flash" and d.hardware.name == "gb300-nvl72"
    assert (d.tp, d.pp, d.dp, d.gpu_count) == (8, 9, 1, 72)
    assert (d.kv_dtype, d.gpu_memory_utilization, d.max_model_len) == ("fp8_e4m3", 0.95, 10**6)
    assert "--tensor-parallel-size 8 --pipeline-parallel-size 9" in d.sources


def test_every_shipped_spec_documents_itself_and_plans() -> None:
    for model in MODELS.values():
        assert model.sources and model.description
    for hardware in HARDWARE.values():
        assert hardware.sources and hardware.description
    for deployment in DEPLOYMENTS.values():
        assert deployment.sources and deployment.description
        p = plan(deployment)
        assert p.kv_tokens_total >= deployment.context_limit and p.warnings == ()


@pytest.mark.parametrize(
    ("lookup", "name", "known"),
    [
        (get_model, "gpt-9", "deepseek-v4.1-flash"),
        (get_hardware, "tpu-v9", "gb300-nvl72"),
        (get_deployment, "nope", DEFAULT_DEPLOYMENT),
    ],
)
def test_unknown_names_list_the_known_ones(
    lookup: Callable[[str], object], name: str, known: str
) -> None:
    with pytest.raises(ConfigError, match=name) as err:
        lookup(name)
    assert known in str(err.value)


def test_lookup_ignores_case() -> None:
    assert get_model("Qwen2.5-Coder-32B") is get_model("qwen2.5-coder-32b")
