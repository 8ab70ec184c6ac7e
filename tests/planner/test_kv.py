"""The planner's arithmetic, checked against cases computed by hand."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest

from agentflow._errors import ConfigError
from agentflow.planner import (
    GIB,
    Deployment,
    GQAAttention,
    HardwareSpec,
    MLAAttention,
    ModelSpec,
    get_deployment,
    get_hardware,
    get_model,
    kv_bytes_per_token_layer,
    kv_bytes_per_token_layer_gpu,
    kv_heads_per_gpu,
    plan,
    plan_to_dict,
    pp_layer_split,
    render_plan,
)

KIB = 1024
QWEN = get_model("qwen2.5-coder-32b")
FLASH = get_model("deepseek-v4.1-flash")
GB300 = get_hardware("gb300-nvl72")
H100 = get_hardware("hgx-h100")

#: A GQA model whose 64 query heads allow TP 16 (Qwen's 40 do not): Llama-3-70B's shape.
WIDE_GQA = ModelSpec(
    name="gqa-64q-8kv",
    layers=80,
    attention=GQAAttention(kv_heads=8, head_dim=128, attention_heads=64),
    total_params=70_000_000_000,
    active_params=70_000_000_000,
    weight_dtype="bf16",
    max_context=131_072,
)


def qwen_on(hardware: HardwareSpec = GB300, **changes: Any) -> Deployment:
    fields: dict[str, Any] = {"name": "t", "model": QWEN, "hardware": hardware, "gpus": 8}
    fields.update(changes)
    return Deployment(**fields)


# --- KV bytes per token ---------------------------------------------------------------------


def test_qwen_is_256_kib_per_token_in_bf16_before_sharding() -> None:
    hand = 2 * 64 * 8 * 128 * 2  # K and V × 64 layers × 8 KV heads × 128 dims × 2 bytes
    assert hand == 256 * KIB
    assert kv_bytes_per_token_layer(QWEN.attention, "bf16") == 2 * 8 * 128 * 2
    p = plan(qwen_on(tp=1, gpus=1))
    assert p.kv_bytes_per_token_model == hand
    assert p.kv_bytes_per_token_gpu == hand  # TP 1: one GPU holds it all


def test_tp8_shards_qwens_kv_heads_to_32_kib_per_gpu() -> None:
    assert kv_heads_per_gpu(QWEN.attention, 8) == (1, 1)
    assert kv_bytes_per_token_layer_gpu(QWEN.attention, 8, "bf16") == 2 * 1 * 128 * 2
    p = plan(qwen_on(tp=8))
    assert p.kv_bytes_per_token_gpu == 32 * KIB
    assert p.kv_bytes_per_token_replica == 256 * KIB  # sharded: no copies
    assert (p.kv_heads_per_gpu, p.kv_head_copies) == (1, 1)


def test_tp4_keeps_two_heads_per_gpu() -> None:
    assert kv_heads_per_gpu(QWEN.attention, 4) == (2, 1)
    assert plan(qwen_on(hardware=H100, tp=4)).kv_bytes_per_token_gpu == 64 * KIB


def test_tp16_replicates_kv_heads_instead_of_sharding_further() -> None:
    # 8 KV heads over 16 ranks: each rank keeps 1 head, every head twice.
    assert kv_heads_per_gpu(WIDE_GQA.attention, 16) == (1, 2)
    d = Deployment(name="t", model=WIDE_GQA, hardware=GB300, tp=16)
    p = plan(d)
    per_gpu_tp16 = 80 * 2 * 1 * 128 * 2  # 40 KiB, the same as at TP 8
    assert p.kv_bytes_per_token_gpu == per_gpu_tp16 == 40 * KIB
    assert plan(dataclasses.replace(d, tp=8)).kv_bytes_per_token_gpu == per_gpu_tp16
    assert p.kv_bytes_per_token_replica == 2 * p.kv_bytes_per_token_model


def test_tp16_is_refused_for_qwen_whose_40_heads_it_does_not_divide() -> None:
    with pytest.raises(ConfigError, match="tp=16 does not divide the model's 40 attention heads"):
        qwen_on(tp=16, gpus=16)


def test_fp8_halves_the_cache() -> None:
    bf16 = plan(qwen_on(tp=8))
    fp8 = plan(qwen_on(tp=8, kv_dtype="fp8_e4m3"))
    assert fp8.kv_bytes_per_token_gpu == 16 * KIB == bf16.kv_bytes_per_token_gpu // 2
    assert fp8.kv_dtype_bytes == 1
    # Same memory, half the bytes per token: twice the blocks (± one from flooring).
    assert abs(fp8.num_blocks - 2 * bf16.num_blocks) <= 1
    assert plan(qwen_on(tp=8, kv_dtype="fp32")).kv_bytes_per_token_gpu == 64 * KIB


def test_mla_by_hand_the_latent_is_replicated_not_sharded() -> None:
    # DeepSeek-V3 dims: 512 latent + 64 RoPE = 576 values per layer per token.
    attn = MLAAttention(kv_lora_rank=512, qk_rope_head_dim=64)
    assert kv_bytes_per_token_layer(attn, "bf16") == 576 * 2 == 1152
    assert kv_bytes_per_token_layer(attn, "fp8_e4m3") == 576
    for tp in (1, 2, 8, 16):
        assert kv_bytes_per_token_layer_gpu(attn, tp, "fp8") == 576  # every rank: all of it
        assert kv_heads_per_gpu(attn, tp) == (1, tp)
    p = plan(get_deployment("deepseek-v4.1-flash-gb300"))
    assert p.kv_bytes_per_token_model == 61 * 576 == 35_136
    assert p.kv_bytes_per_token_gpu == 7 * 576 == 4_032  # a 7-layer stage
    assert p.kv_bytes_per_token_replica == 8 * 61 * 576 == 281_088
    assert p.kv_head_copies == 8


# --- Pipeline stages ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (61, 9, (6, 7, 7, 7, 7, 7, 7, 7, 6)),  # 61 = 9 × 6 + 7: stages 1..7 get one more
        (64, 1, (64,)),
        (64, 4, (16, 16, 16, 16)),
        (10, 4, (2, 3, 3, 2)),  # the remainder goes to the middle stages
        (5, 2, (3, 2)),
        (7, 7, (1,) * 7),
    ],
)
def test_pp_split_follows_vllm(layers: int, pp: int, expected: tuple[int, ...]) -> None:
    assert pp_layer_split(layers, pp) == expected


def test_pp_split_always_covers_every_layer() -> None:
    for layers in range(1, 130):
        for pp in range(1, min(layers, 24) + 1):
            parts = pp_layer_split(layers, pp)
            assert sum(parts) == layers and len(parts) == pp
            assert max(parts) - min(parts) <= 1


def test_the_stage_with_most_layers_decides_capacity() -> None:
    p = plan(get_deployment("deepseek-v4.1-flash-gb300"))
    assert [s.layers for s in p.stages] == [6, 7, 7, 7, 7, 7, 7, 7, 6]
    assert p.bottleneck_stage == 1
    assert p.num_blocks == min(s.num_blocks for s in p.stages)
    assert p.stages[0].num_blocks > p.num_blocks
    # An explicit partition moves the bottleneck.
    d = dataclasses.replace(
        get_deployment("deepseek-v4.1-flash-gb300"), pp_partition=(5, 7, 7, 7, 7, 7, 7, 7, 7)
    )
    assert plan(d).stages[0].layers == 5


# --- Memory and capacity: the report's command by hand ---------------------------------------


def test_the_seed_deployment_by_hand() -> None:
    """TP 8 × PP 9 on 72 GB300s, fp8 KV, utilisation 0.95, 5 GiB reserve, blocks of 128,
    from the 284,208 MiB nvidia-smi shows per GB300 (not the nominal 288 GiB)."""
    memory = 284_208 * 2**20  # 277.55 GiB visible to CUDA
    usable = math.ceil(memory * 95 / 100)
    weights = math.ceil(552 * 10**9 * 7 / (61 * 8))  # 7 of 61 layers' weights, over TP 8
    reserve = 5 * GIB
    free = usable - weights - reserve
    assert (usable, weights, free) == (283_113_003_418, 7_918_032_787, 269_826_261_511)
    blocks = free // (128 * 7 * 576)
    assert blocks == 522_821

    p = plan(get_deployment("deepseek-v4.1-flash-gb300"))
    assert (p.nominal_memory_bytes_per_gpu, p.memory_bytes_per_gpu) == (288 * GIB, memory)
    assert p.usable_bytes_per_gpu == usable
    assert p.weight_bytes_per_gpu == weights
    assert p.weight_bytes_total == 552 * 10**9
    assert p.free_kv_bytes_per_gpu == free
    assert p.num_blocks == blocks
    assert p.kv_tokens_per_replica == p.kv_tokens_total == blocks * 128 == 66_921_088
    assert p.context_tokens == 1_000_000
    assert p.blocks_per_session == math.ceil(1_000_000 / 128) == 7_813
    assert p.sessions_per_replica == p.sessions_total == blocks // 7_813 == 66
    assert p.max_model_len_concurrency == blocks / 7_813  # vLLM's: whole blocks a request
    assert (p.gpus_used, p.gpus_idle, p.replicas) == (72, 0, 1)
    assert p.warnings == ()


def test_the_qwen_deployment_by_hand() -> None:
    usable = math.ceil(284_208 * 2**20 * 9 / 10)
    weights = 32_500_000_000 * 2 // 8  # bf16 over TP 8
    free = usable - weights - 5 * GIB
    assert free == 254_718_609_908
    p = plan(get_deployment("qwen2.5-coder-32b-gb300-tp8"))
    assert p.free_kv_bytes_per_gpu == free
    assert p.num_blocks == free // (16 * 32 * KIB) == 485_837
    assert p.kv_tokens_total == 485_837 * 16 == 7_773_392
    # The default session length is capped at max_model_len (131,072 < 1M).
    assert p.context_tokens == 131_072
    assert p.sessions_total == 485_837 // (131_072 // 16) == 59


def test_plans_start_from_the_visible_memory_and_show_both() -> None:
    """The driver's share is not the reserve's: a GB300 keeps 10.45 GiB of its nominal 288,
    more than the whole 5 GiB reserve, and the text and JSON give both figures."""
    seed = get_deployment("deepseek-v4.1-flash-gb300")
    hw = seed.hardware
    assert (hw.gpu_memory_gib, hw.gpu_memory_visible_gib) == (288.0, 277.546875)
    assert "284,208 MiB" in hw.visible_memory_source
    visible, nominal = plan(seed), plan(dataclasses.replace(
        seed, hardware=dataclasses.replace(hw, gpu_memory_visible_gib=None)))  # fmt: skip
    kept = nominal.usable_bytes_per_gpu - visible.usable_bytes_per_gpu
    assert kept == math.ceil(288 * GIB * 0.95) - visible.usable_bytes_per_gpu
    assert kept > seed.reserve_gib * GIB  # 9.93 GiB of usable memory more than the reserve
    assert (nominal.kv_tokens_total, visible.kv_tokens_total) == (69_565_696, 66_921_088)
    text = render_plan(visible)
    assert "288 GiB nominal, 277.55 GiB visible to CUDA" in text
    assert "− kept by the driver, not visible  10.45 GiB" in text
    assert "= visible to CUDA" in text and "more than the whole 5 GiB reserve" in text
    assert "memory (nominal; visible unknown)" in render_plan(nominal)
    assert any("Visible memory: not known" in a for a in nominal.assumptions)
    as_json = plan_to_dict(visible)
    assert as_json["deployment"]["hardware"]["gpu_memory_visible_gib"] == 277.546875
    assert as_json["results"]["nominal_memory_bytes_per_gpu"] == 288 * GIB
    assert as_json["results"]["memory_bytes_per_gpu"] == 284_208 * 2**20
    for name in ("gb300-nvl72", "hgx-h200", "hgx-h100"):
        h = get_hardware(name)
        assert h.gpu_memory_visible_gib is not None and h.visible_memory_source, name
        assert (
            h.gpu_memory_visible_gib < h.gpu_memory_gib and h.planned_memory_gib < h.gpu_memory_gib
        )


def test_data_parallel_replicas_multiply_tokens_and_sessions() -> None:
    one = plan(qwen_on(tp=8, gpus=16))
    two = plan(qwen_on(tp=8, gpus=16, dp=2))
    assert two.kv_tokens_per_replica == one.kv_tokens_per_replica
    assert two.kv_tokens_total == 2 * one.kv_tokens_total
    assert two.sessions_total == 2 * one.sessions_total
    assert (one.gpus_idle, two.gpus_idle) == (8, 0)


def test_reserve_and_utilisation_come_off_the_kv_memory() -> None:
    base = plan(qwen_on(tp=8))
    more = plan(qwen_on(tp=8, reserve_gib=15.0))
    assert base.free_kv_bytes_per_gpu - more.free_kv_bytes_per_gpu == 10 * GIB
    lower = plan(qwen_on(tp=8, gpu_memory_utilization=0.5))
    assert lower.usable_bytes_per_gpu == 284_208 * 2**20 // 2


def test_block_rounding() -> None:
    p = plan(qwen_on(tp=8, block_size=256), context_tokens=1000)
    assert p.kv_tokens_per_replica % 256 == 0
    assert p.blocks_per_session == 4  # 1000 tokens take 4 blocks of 256
    assert p.sessions_per_replica == p.num_blocks // 4


def test_max_model_len_concurrency_is_vllms_whole_blocks_figure() -> None:
    """vLLM logs ``num_blocks / cdiv(max_model_len, block_size)``: a request of 1,000
    tokens takes 8 blocks of 128 (1,024 tokens), not 1,000 tokens' worth."""
    d = dataclasses.replace(get_deployment("deepseek-v4.1-flash-gb300"), max_model_len=1000)
    p = plan(d)
    assert d.block_size == 128
    assert p.max_model_len_concurrency == p.num_blocks / 8
    assert p.max_model_len_concurrency < p.kv_tokens_per_replica / 1000


# --- Errors and warnings -------------------------------------------------------------------


def test_weights_that_do_not_fit_are_an_error_naming_them() -> None:
    with pytest.raises(ConfigError, match="the weights do not fit") as err:
        plan(dataclasses.replace(get_deployment("deepseek-v4.1-flash-gb300"), tp=1, pp=1))
    assert "514.09 GiB of weights" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_not_one_block_is_an_error() -> None:
    # Qwen on one H100 at utilisation 0.83: 66.4 GiB − 60.5 GiB of weights − 5 GiB ≈ 0.9 GiB.
    d = qwen_on(hardware=H100, tp=1, gpus=1, gpu_memory_utilization=0.83, block_size=4096)
    with pytest.raises(ConfigError, match="not one KV block fits"):
        plan(d)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"tp": 8, "pp": 9, "dp": 2}, r"tp × pp × dp = 8 × 9 × 2 = 144 GPUs, but gpus=72"),
        ({"tp": 0}, "tp must be an integer ≥ 1, got 0"),
        ({"pp": 62, "tp": 1}, "pp=62 exceeds the model's 61 layers"),
        ({"gpu_memory_utilization": 0.0}, r"gpu_memory_utilization must be in \(0, 1\]"),
        ({"gpu_memory_utilization": 1.2}, r"gpu_memory_utilization must be in \(0, 1\]"),
        ({"reserve_gib": -1.0}, "reserve_gib must be ≥ 0"),
        ({"kv_dtype": "fp7"}, "kv_dtype='fp7' is not a known dtype"),
        ({"block_size": 0}, "block_size must be an integer ≥ 1"),
        ({"pp_partition": (7, 7)}, "has 2 stages, pp=9"),
        ({"pp_partition": (7,) * 9}, "sums to 63, the model has 61 layers"),
        ({"tp": 3, "pp": 1}, "tp=3 does not divide the model's 128 attention heads"),
        # Wrong types were a TypeError or an AttributeError, or (a bool) taken as a number.
        ({"reserve_gib": "5"}, "reserve_gib must be ≥ 0 GiB .*, got '5'"),
        ({"reserve_gib": True}, "reserve_gib must be ≥ 0 GiB .*, got True"),
        ({"reserve_gib": 1e300}, r"reserve_gib must be .* at most 65536 GiB \(64 TiB\)"),
        ({"kv_dtype": None}, r"kv_dtype must be a dtype name \(a string\), got None"),
        ({"gpu_memory_utilization": True}, r"gpu_memory_utilization must be in \(0, 1\]"),
        ({"dp": 10**300}, r"dp must be at most 1e\+18, got an int of 997 bits"),
        ({"block_size": 10**18 + 1}, r"block_size must be at most 1e\+18, got 1000000000000000001"),
    ],
)
def test_bad_deployments_name_the_field(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(get_deployment("deepseek-v4.1-flash-gb300"), **changes)


def test_kv_heads_and_tp_must_divide_one_another() -> None:
    model = dataclasses.replace(QWEN, attention=GQAAttention(kv_heads=8, head_dim=128))
    with pytest.raises(ConfigError, match="tp=3 and the model's 8 KV heads"):
        Deployment(name="t", model=model, hardware=GB300, tp=3)
    with pytest.raises(ConfigError, match="tp=12 and the model's 8 KV heads"):
        Deployment(name="t", model=model, hardware=GB300, tp=12)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: GQAAttention(kv_heads=0, head_dim=128), "kv_heads must be an integer ≥ 1"),
        (lambda: MLAAttention(kv_lora_rank=512, qk_rope_head_dim=-1), "qk_rope_head_dim"),
        (lambda: dataclasses.replace(QWEN, layers=0), "layers must be an integer ≥ 1"),
        (lambda: dataclasses.replace(QWEN, active_params=10**12), "exceeds total_params"),
        (lambda: dataclasses.replace(QWEN, weight_dtype="fp3"), "weight_dtype='fp3'"),
        (lambda: dataclasses.replace(GB300, gpu_memory_gib=0.0), "gpu_memory_gib must be > 0"),
        (
            lambda: dataclasses.replace(GB300, gpu_memory_visible_gib=300.0),
            "gpu_memory_visible_gib must be > 0 and at most gpu_memory_gib=288",
        ),
        (
            lambda: dataclasses.replace(GB300, gpu_memory_visible_gib=0.0),
            "gpu_memory_visible_gib must be > 0",
        ),
        (lambda: dataclasses.replace(GB300, gpus=0), "gpus must be an integer ≥ 1"),
        (
            lambda: dataclasses.replace(GB300, gpu_memory_gib="80"),  # type: ignore[arg-type]
            "hardware 'gb300-nvl72': gpu_memory_gib must be > 0 GiB .*, got '80'",
        ),
        (
            lambda: dataclasses.replace(GB300, gpu_memory_gib=True),
            "gpu_memory_gib must be > 0 GiB .*, got True",
        ),
        (  # the plan printed a 306-digit token count
            lambda: dataclasses.replace(GB300, gpu_memory_gib=1e300, gpu_memory_visible_gib=None),
            r"gpu_memory_gib must be > 0 GiB and at most 65536 GiB \(64 TiB\), got 1e\+300",
        ),
        (
            lambda: dataclasses.replace(GB300, gpu_memory_visible_gib=True),
            "gpu_memory_visible_gib must be > 0",
        ),
        (lambda: dataclasses.replace(GB300, gpus=10**19), r"gpus must be at most 1e\+18"),
        (
            lambda: dataclasses.replace(QWEN, weight_dtype=16),  # type: ignore[arg-type]
            r"weight_dtype must be a dtype name \(a string\), got 16",
        ),
    ],
)
def test_bad_specs_name_the_field(make: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


def test_bad_context_is_refused() -> None:
    with pytest.raises(ConfigError, match="context_tokens must be ≥ 1"):
        plan(qwen_on(tp=8), context_tokens=0)
    with pytest.raises(ConfigError, match=r"context_tokens must be at most 1e\+18"):
        plan(qwen_on(tp=8), context_tokens=10**300)


def test_the_largest_memory_and_counts_are_taken() -> None:
    """The bounds are inclusive: 64 TiB per GPU and a reserve of as much plan (the
    reserve then leaves nothing: an error about fit, not about the field)."""
    big = dataclasses.replace(GB300, gpu_memory_gib=65536, gpu_memory_visible_gib=None)
    assert plan(qwen_on(hardware=big, tp=8)).kv_tokens_total > 0
    with pytest.raises(ConfigError, match="do not fit"):
        plan(qwen_on(hardware=big, tp=8, reserve_gib=65536.0))


def test_warnings_for_sessions_longer_than_max_model_len_and_a_cache_too_small() -> None:
    p = plan(qwen_on(tp=8), context_tokens=1_000_000)
    assert p.context_tokens == 1_000_000 and p.sessions_total == 7
    assert any("exceed max_model_len 131,072" in w for w in p.warnings)
    small = plan(qwen_on(hardware=H100, tp=1, gpus=1))
    assert small.kv_tokens_total < 131_072
    assert any("vLLM refuses to start" in w for w in small.warnings)
    assert any("Not one session" in w for w in small.warnings)


def test_assumptions_are_stated() -> None:
    p = plan(get_deployment("deepseek-v4.1-flash-gb300"))
    text = "\n".join(p.assumptions)
    for needle in (
        "DeepSeek-V3's are assumed",
        "all 8 TP ranks keep the whole latent",
        "[6, 7, 7, 7, 7, 7, 7, 7, 6]",
        "a reserve of 5 GiB",
        "blocks of 128 tokens",
        "fp8 scales are per layer",
        "none shared a KV block",
    ):
        assert needle in text
    gqa = "\n".join(plan(qwen_on(tp=8)).assumptions)
    assert "tp=8 shards the 8 KV heads: 1 per GPU" in gqa
