"""The shipped specs: the models, hardware and deployments of the report agentflow grew from.

Every figure carries its source in ``sources``; what is assumed says so. The report (a
third-party news piece, ``shared/SEED.md``) gives DeepSeek V4.1 Flash's parameter counts and
window and the vLLM command it was served with; it gives no layer dimensions, so the DeepSeek
entries take DeepSeek-V3's published MLA dimensions, as issue 4 asks.
"""

from __future__ import annotations

from typing import TypeVar

from agentflow._errors import ConfigError

from ._specs import Deployment, GQAAttention, HardwareSpec, MLAAttention, ModelSpec

__all__ = [
    "DEFAULT_DEPLOYMENT",
    "DEPLOYMENTS",
    "HARDWARE",
    "MODELS",
    "get_deployment",
    "get_hardware",
    "get_model",
]

_T = TypeVar("_T")

_V3_DIMS = (
    "Layer dimensions are not public; DeepSeek-V3's are assumed: 61 layers, MLA with "
    "kv_lora_rank 512 and qk_rope_head_dim 64, 128 query heads, fp8 weights "
    "(deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json; the same 512/64 are quoted "
    "in vLLM's vllm/v1/attention/backends/mla/common.py). This is dense MLA: a model that "
    "compresses or sparsifies its cache holds less per token (see docs/planner.md)."
)

_FLASH = ModelSpec(
    name="deepseek-v4.1-flash",
    layers=61,
    attention=MLAAttention(kv_lora_rank=512, qk_rope_head_dim=64, attention_heads=128),
    total_params=552_000_000_000,
    active_params=16_000_000_000,
    weight_dtype="fp8",
    max_context=1_000_000,
    description="DeepSeek V4.1 Flash: 16B active / 552B MoE, 1M context",
    sources="16B active / 552B total and the 1,000,000-token window: the report in "
    "shared/SEED.md (a third-party claim). " + _V3_DIMS,
)

_V4 = ModelSpec(
    name="deepseek-v4",
    layers=61,
    attention=MLAAttention(kv_lora_rank=512, qk_rope_head_dim=64, attention_heads=128),
    total_params=671_000_000_000,
    active_params=37_000_000_000,
    weight_dtype="fp8",
    max_context=131_072,
    description="DeepSeek V4: 37B active / 671B MoE, 128k context",
    sources="37B active / 671B total and the 128k window (read as 128 × 1024): the report in "
    "shared/SEED.md and issue 4. " + _V3_DIMS,
)

_QWEN = ModelSpec(
    name="qwen2.5-coder-32b",
    layers=64,
    attention=GQAAttention(kv_heads=8, head_dim=128, attention_heads=40),
    total_params=32_500_000_000,
    active_params=32_500_000_000,
    weight_dtype="bf16",
    max_context=131_072,
    description="Qwen2.5-Coder-32B-Instruct: dense 32.5B, GQA, 128k context with YaRN",
    sources="Qwen2.5-32B config.json: 64 layers, 40 attention heads, 8 KV heads, hidden 5120 "
    "(head dim 5120 / 40 = 128), bfloat16. 32.5B parameters and the 131,072-token window "
    "(YaRN) from the Qwen2.5-Coder-32B-Instruct model card.",
)

#: The shipped models by name.
MODELS: dict[str, ModelSpec] = {m.name: m for m in (_FLASH, _V4, _QWEN)}

_GB300_NVL72 = HardwareSpec(
    name="gb300-nvl72",
    gpu="GB300",
    gpu_memory_gib=288.0,
    gpus=72,
    gpu_memory_visible_gib=284_208 / 1024,  # 277.55 GiB
    visible_memory_source="nvidia-smi reports 284,208 MiB (277.55 GiB) total on each GB300 "
    "(drivers 580.82.07 and 580.105.08, in published nvidia-smi outputs of GB300 nodes, e.g. "
    "a getting-started guide for OCI's BM.GPU.GB300.4 shape); NVIDIA's whole-GPU MIG "
    "profile on the GB300 is named 7g.278gb. CUDA's own total (what vLLM logs "
    "as total_gpu_memory) can be a few hundred MiB lower still (on an H100: 79.22 GiB against "
    "nvidia-smi's 79.65 GiB); pass --gpu-visible-gib with the figure from vLLM's log.",
    description="NVIDIA GB300 NVL72 rack: 72 Blackwell Ultra GPUs × 288 GB HBM3e",
    sources="72 GPUs in one NVLink domain: the report in shared/SEED.md and NVIDIA's GB300 "
    "NVL72 product page; 288 GB of HBM3e per GPU (nominal): NVIDIA (8 stacks × 36 GB).",
)

_HGX_H200 = HardwareSpec(
    name="hgx-h200",
    gpu="H200",
    gpu_memory_gib=141.0,
    gpus=8,
    gpu_memory_visible_gib=143_771 / 1024,  # 140.40 GiB
    visible_memory_source="nvidia-smi reports 143,771 MiB (140.40 GiB) total on an H200 "
    "SXM (as in published nvidia-smi outputs of H200 nodes); CUDA's own total may be a few "
    "hundred MiB lower.",
    description="NVIDIA HGX H200: 8 × H200 141 GB HBM3e",
    sources="141 GB of HBM3e per GPU (nominal), 8 GPUs per HGX board: NVIDIA's H200 datasheet.",
)

_HGX_H100 = HardwareSpec(
    name="hgx-h100",
    gpu="H100",
    gpu_memory_gib=80.0,
    gpus=8,
    gpu_memory_visible_gib=79.22,
    visible_memory_source="vLLM logs total_gpu_memory 79.22GiB on an H100 (the CUDA total it "
    "multiplies by gpu_memory_utilization; vllm-project/vllm PR #10511); nvidia-smi shows "
    "81,559 MiB (79.65 GiB; modal-labs/modal-client PR #2797).",
    description="NVIDIA HGX H100: 8 × H100 SXM 80 GB HBM3",
    sources="80 GB of HBM3 per GPU (nominal), 8 GPUs per HGX board: NVIDIA's H100 datasheet.",
)

#: The shipped hardware by name.
HARDWARE: dict[str, HardwareSpec] = {h.name: h for h in (_GB300_NVL72, _HGX_H200, _HGX_H100)}

_MLA_BLOCK = (
    "block_size 128: the command sets none; vLLM's CUDA platform forces 128 for its CUTLASS "
    "MLA backend (its Blackwell default in the versions read) and 64 for FlashMLA and "
    "FlashInfer-MLA — either moves the capacity by less than one block."
)

_SEED = Deployment(
    name="deepseek-v4.1-flash-gb300",
    model=_FLASH,
    hardware=_GB300_NVL72,
    tp=8,
    pp=9,
    dp=1,
    kv_dtype="fp8_e4m3",
    gpu_memory_utilization=0.95,
    block_size=128,
    max_model_len=1_000_000,
    description="The report's vLLM command: DeepSeek V4.1 Flash on a GB300 NVL72, TP 8 × PP 9, "
    "fp8 KV",
    sources="shared/SEED.md: `vllm.entrypoints.openai.api_server --model "
    "deepseek-ai/DeepSeek-V4.1-Flash --tensor-parallel-size 8 --pipeline-parallel-size 9 "
    "--max-model-len 1000000 --enable-prefix-caching --kv-cache-dtype fp8_e4m3 "
    "--gpu-memory-utilization 0.95 --enforce-eager` (eager: no CUDA graphs to reserve "
    "for). " + _MLA_BLOCK,
)

_V4_DEPLOYMENT = Deployment(
    name="deepseek-v4-gb300",
    model=_V4,
    hardware=_GB300_NVL72,
    tp=8,
    pp=9,
    dp=1,
    kv_dtype="fp8_e4m3",
    gpu_memory_utilization=0.95,
    block_size=128,
    max_model_len=131_072,
    description="DeepSeek V4 on a GB300 NVL72 with the report's command (TP 8 × PP 9, fp8 KV), "
    "max-model-len 128k",
    sources="Assumed: the report's V4.1 Flash command with the V4 model and its 128k window "
    "(the report measured V4 on the same rack). " + _MLA_BLOCK,
)

_QWEN_DEPLOYMENT = Deployment(
    name="qwen2.5-coder-32b-gb300-tp8",
    model=_QWEN,
    hardware=_GB300_NVL72,
    gpus=8,
    tp=8,
    kv_dtype="bf16",
    gpu_memory_utilization=0.90,
    block_size=16,
    max_model_len=131_072,
    description="Qwen2.5-Coder-32B on 8 GB300 GPUs (two trays of the rack), TP 8, bf16 KV",
    sources="Assumed, as the simulator profile qwen2.5-coder-32b: 8 GPUs, TP 8, vLLM's "
    "defaults otherwise (gpu_memory_utilization 0.90, block_size 16, KV in the model dtype "
    "bf16).",
)

#: The shipped deployments by name.
DEPLOYMENTS: dict[str, Deployment] = {d.name: d for d in (_SEED, _V4_DEPLOYMENT, _QWEN_DEPLOYMENT)}

#: The deployment ``agentflow plan`` uses when given nothing: the report's vLLM command.
DEFAULT_DEPLOYMENT = _SEED.name


def _get(table: dict[str, _T], name: str, what: str) -> _T:
    try:
        return table[name.lower()]
    except KeyError:
        known = ", ".join(sorted(table))
        raise ConfigError(f"unknown {what} {name!r}; known: {known}") from None


def get_model(name: str) -> ModelSpec:
    """The shipped model called ``name`` (case-insensitive).

    Raises:
        ConfigError: no such model; the message lists the known names.
    """
    return _get(MODELS, name, "model")


def get_hardware(name: str) -> HardwareSpec:
    """The shipped hardware called ``name`` (case-insensitive).

    Raises:
        ConfigError: no such hardware; the message lists the known names.
    """
    return _get(HARDWARE, name, "hardware")


def get_deployment(name: str) -> Deployment:
    """The shipped deployment called ``name`` (case-insensitive).

    Raises:
        ConfigError: no such deployment; the message lists the known names.
    """
    return _get(DEPLOYMENTS, name, "deployment")
