"""The planner's limits: settings vLLM would refuse or that no system has, and input too large
to plan — each a warning or a ConfigError naming the field, never a silent figure or a crash."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from agentflow._errors import ConfigError
from agentflow.planner import MAX_PIPELINE_STAGES, Deployment, get_deployment, plan, render_plan
from agentflow.planner.cli import main

QWEN_TP8 = get_deployment("qwen2.5-coder-32b-gb300-tp8")


def test_max_model_len_past_the_model_window_is_a_warning() -> None:
    """Qwen's window is 131,072 tokens; a 1M max_model_len was planned as 7 sessions with no
    warning, though vLLM refuses it without VLLM_ALLOW_LONG_MAX_MODEL_LEN."""
    p = plan(dataclasses.replace(QWEN_TP8, max_model_len=1_000_000))
    (warning,) = [w for w in p.warnings if "window" in w]
    assert "max_model_len 1,000,000" in warning and "131,072" in warning
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in warning
    assert warning in " ".join(render_plan(p).split())
    # Within the window: no such warning.
    within = plan(dataclasses.replace(QWEN_TP8, max_model_len=131_072))
    assert not any("window" in w for w in within.warnings)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (  # accepted, then an AttributeError in plan()
            lambda: dataclasses.replace(QWEN_TP8.model, attention=None),  # type: ignore[arg-type]
            r"model 'qwen2.5-coder-32b': attention must be a GQAAttention or MLAAttention, "
            "got None",
        ),
        (
            lambda: dataclasses.replace(
                QWEN_TP8.model,
                attention={"kv_heads": 8, "head_dim": 128},  # type: ignore[arg-type]
            ),
            "attention must be a GQAAttention or MLAAttention, got {'kv_heads'",
        ),
        (  # an AttributeError from the validation itself
            lambda: dataclasses.replace(QWEN_TP8, model=None),  # type: ignore[arg-type]
            "deployment 'qwen2.5-coder-32b-gb300-tp8': model must be a ModelSpec, got None",
        ),
        (
            lambda: dataclasses.replace(QWEN_TP8, hardware="gb300-nvl72"),  # type: ignore[arg-type]
            "hardware must be a HardwareSpec, got 'gb300-nvl72'",
        ),
    ],
)
def test_a_spec_of_the_wrong_type_names_the_field(make: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


@pytest.mark.parametrize("field", ["gpu_memory_gib", "gpu_memory_visible_gib"])
@pytest.mark.parametrize("value", [10**400, 10**5000], ids=["1e400", "1e5000"])
def test_a_huge_int_of_gib_is_refused_naming_the_field(field: str, value: int) -> None:
    """An int too large for a float was an OverflowError from math.isfinite; one past Python's
    limit on int digits could not even be shown."""
    changes: dict[str, Any] = {field: value}
    with pytest.raises(ConfigError, match=rf"{field} must be > 0 GiB and at most 65536 GiB"):
        dataclasses.replace(QWEN_TP8.hardware, **changes)
    with pytest.raises(ConfigError, match=r"reserve_gib must be ≥ 0 GiB .* bits"):
        dataclasses.replace(QWEN_TP8, reserve_gib=value)


def test_more_gpus_than_the_hardware_has_is_several_of_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--gpus 16`` on an 8-GPU node (TP 8 × PP 2 over two nodes) was refused as more GPUs
    than the hardware has; it plans, warning how many of the hardware are assumed."""
    argv = ["--hardware", "hgx-h100", "--model", "qwen2.5-coder-32b", "--tp", "8", "--pp", "2"]
    assert main([*argv, "--gpus", "16"]) == 0
    out = capsys.readouterr().out
    assert "hgx-h100: 16 × H100" in out
    assert "TP 8 × PP 2 × DP 1 = 16 of 16 GPUs (0 idle)" in out
    assert "gpus=16 is more than one hgx-h100's 8 GPUs: 2 of them assumed." in out
    rack = plan(dataclasses.replace(QWEN_TP8, gpus=73))
    assert rack.gpus_idle == 65
    assert "gpus=73 is more than one gb300-nvl72's 72 GPUs: 2 of them assumed." in rack.warnings
    assert not any("gpus=" in w for w in plan(dataclasses.replace(QWEN_TP8, gpus=72)).warnings)


def _deep(stages: int) -> Deployment:
    """Qwen stretched to ``stages`` layers on as many GPUs, one layer per pipeline stage."""
    model = dataclasses.replace(QWEN_TP8.model, layers=stages)
    hardware = dataclasses.replace(QWEN_TP8.hardware, gpus=stages)
    return dataclasses.replace(
        QWEN_TP8, model=model, hardware=hardware, gpus=stages, tp=1, pp=stages
    )


def test_pipeline_stages_are_bounded() -> None:
    """pp was taken up to 10¹⁸ (given as many layers and GPUs), and plan() and render_plan()
    are linear in it: pp=10⁶ took seconds and printed 68 MB."""
    deepest = plan(_deep(MAX_PIPELINE_STAGES))
    assert len(deepest.stages) == MAX_PIPELINE_STAGES == 1024
    with pytest.raises(ConfigError, match="pp must be at most 1024 pipeline stages, got 1025"):
        _deep(MAX_PIPELINE_STAGES + 1)
    with pytest.raises(ConfigError, match=r"got 1000000$"):
        _deep(10**6)


def test_a_partition_of_too_many_stages_is_refused_without_listing_it() -> None:
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(QWEN_TP8, pp=8, tp=1, pp_partition=(1,) * 10**6)
    message = str(err.value)
    assert "pp_partition must have at most 1024 stages, got 1000000" in message
    assert len(message) < 300


def test_a_list_partition_is_taken_as_a_tuple_and_the_deployment_hashes() -> None:
    base = get_deployment("qwen2.5-coder-32b-gb300-tp8")
    d = dataclasses.replace(base, tp=1, pp=2, gpus=2, pp_partition=[32, 32])  # type: ignore[arg-type]
    assert d.pp_partition == (32, 32)
    assert hash(d) == hash(dataclasses.replace(d))
