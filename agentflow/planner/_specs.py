"""What the planner plans for: a model, the hardware, and how one is deployed on the other.

Three frozen records, validated when built (a bad field raises
:class:`~agentflow.ConfigError` naming the field and the value):

- :class:`ModelSpec` — layers, attention layout (:class:`GQAAttention` for MHA/GQA/MQA, or
  :class:`MLAAttention` for DeepSeek's multi-head latent attention), parameter counts and the
  weight dtype;
- :class:`HardwareSpec` — memory per GPU and how many GPUs the system has;
- :class:`Deployment` — a model on hardware with vLLM's knobs: tensor/pipeline/data parallel
  sizes, ``gpu_memory_utilization``, the KV-cache dtype, the block size, ``max_model_len`` and
  the memory reserved per GPU for everything that is neither weights nor KV.

Dtype names follow vLLM's ``--dtype`` / ``--kv-cache-dtype`` spellings; their tables are in
:mod:`agentflow.planner._dtypes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentflow._errors import ConfigError
from agentflow._seconds import shown

from ._dtypes import kv_dtype_bytes, weight_dtype_bits

__all__ = [
    "DEFAULT_RESERVE_GIB",
    "MAX_COUNT",
    "MAX_GPU_MEMORY_GIB",
    "MAX_PIPELINE_STAGES",
    "Attention",
    "Deployment",
    "GQAAttention",
    "HardwareSpec",
    "MLAAttention",
    "ModelSpec",
]

#: Default memory reserved per GPU for what is neither weights nor KV cache (activation peak,
#: NCCL buffers, the CUDA context; the driver's own share is not visible to CUDA and is taken
#: off through :attr:`HardwareSpec.gpu_memory_visible_gib`). vLLM measures this at startup; for
#: Llama-3-8B on an H100 it logged 1.26 GiB of activation peak plus 1.79 GiB (TP 1) or 3.58 GiB
#: (TP 2) of non-torch memory (vllm-project/vllm PR #10511). 5 GiB covers those with room for
#: larger hidden sizes and NCCL groups; read the real figure from vLLM's log and pass it.
DEFAULT_RESERVE_GIB = 5.0


#: The largest count a spec takes (layers, parameters, GPUs, parallel sizes, block size,
#: context): far past any model, window or fleet (10¹⁸). Past it the figures printed run to
#: hundreds of digits.
MAX_COUNT = 10**18

#: The most memory per GPU, in GiB, a spec takes (and the most it can reserve): 64 TiB,
#: hundreds of times today's largest GPU, and bounded so the token figures stay printable.
MAX_GPU_MEMORY_GIB = 64 * 1024

#: The most pipeline stages a deployment takes (``pp`` and the length of ``pp_partition``).
#: A plan and its text hold a line per stage, so past a few thousand they grow without use;
#: real pipelines have a handful of stages, and never more than the model's layers.
MAX_PIPELINE_STAGES = 1024


def _shown(value: object) -> str:
    # (the digits of an int up to 256 bits: a count past MAX_COUNT is still readable)
    return shown(value, max_bits=256)


def _positive_int(owner: str, field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}: {field} must be an integer ≥ 1, got {_shown(value)}")
    if value > MAX_COUNT:
        raise ConfigError(f"{owner}: {field} must be at most {MAX_COUNT:.0e}, got {_shown(value)}")


def _gib(owner: str, field: str, value: object, *, zero: bool) -> None:
    """``value`` is a finite number of GiB, > 0 (≥ 0 with ``zero``) and at most
    :data:`MAX_GPU_MEMORY_GIB`; a :class:`ConfigError` naming ``field`` otherwise."""
    least = "≥ 0" if zero else "> 0"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        # The bound before isfinite: an int too large for a float is an OverflowError there.
        or value > MAX_GPU_MEMORY_GIB
        or not math.isfinite(value)
        or not (value >= 0 if zero else value > 0)
    ):
        raise ConfigError(
            f"{owner}: {field} must be {least} GiB and at most {MAX_GPU_MEMORY_GIB} GiB "
            f"(64 TiB), got {_shown(value)}"
        )


def _instance(owner: str, field: str, value: object, kinds: tuple[type, ...]) -> None:
    """``value`` is one of ``kinds``; a :class:`ConfigError` naming ``field`` otherwise."""
    if not isinstance(value, kinds):
        names = " or ".join(kind.__name__ for kind in kinds)
        raise ConfigError(f"{owner}: {field} must be a {names}, got {value!r}")


def _optional_positive_int(owner: str, field: str, value: object) -> None:
    if value is not None:
        _positive_int(owner, field, value)


@dataclass(frozen=True, slots=True, kw_only=True)
class GQAAttention:
    """Multi-head attention with ``kv_heads`` key/value heads (MHA, GQA or MQA).

    Each layer caches a key and a value vector of ``head_dim`` values per KV head per token.
    Tensor parallelism shards the KV heads across ranks; when TP exceeds ``kv_heads`` each
    rank keeps one head and every head is replicated ``TP / kv_heads`` times (vLLM's rule).

    Attributes:
        kv_heads: key/value heads per layer (``num_key_value_heads``).
        head_dim: values per head.
        attention_heads: query heads (``num_attention_heads``), when known; vLLM requires TP to
            divide it, and the planner checks that.
    """

    kv_heads: int
    head_dim: int
    attention_heads: int | None = None

    def __post_init__(self) -> None:
        _positive_int("GQA attention", "kv_heads", self.kv_heads)
        _positive_int("GQA attention", "head_dim", self.head_dim)
        _optional_positive_int("GQA attention", "attention_heads", self.attention_heads)

    @property
    def kind(self) -> str:
        """``"gqa"`` (MHA and MQA are the cases ``kv_heads == attention_heads`` and ``1``)."""
        return "gqa"

    def values_per_token_layer(self) -> int:
        """Values cached per token per layer before any sharding: 2 × kv_heads × head_dim."""
        return 2 * self.kv_heads * self.head_dim

    def describe(self) -> str:
        """One line, e.g. ``GQA: 8 KV heads × 128 dims (40 query heads)``."""
        q = f" ({self.attention_heads} query heads)" if self.attention_heads else ""
        return f"GQA: {self.kv_heads} KV heads × {self.head_dim} dims{q}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MLAAttention:
    """DeepSeek's multi-head latent attention.

    Each layer caches one compressed latent of ``kv_lora_rank`` values plus the decoupled RoPE
    key of ``qk_rope_head_dim`` values per token — one "head" shared by every query head, so
    tensor parallelism cannot shard it: every TP rank keeps the whole latent.

    Attributes:
        kv_lora_rank: width of the compressed KV latent (DeepSeek-V3: 512).
        qk_rope_head_dim: width of the RoPE key part (DeepSeek-V3: 64).
        attention_heads: query heads, when known (DeepSeek-V3: 128); TP must divide it.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    attention_heads: int | None = None

    def __post_init__(self) -> None:
        _positive_int("MLA attention", "kv_lora_rank", self.kv_lora_rank)
        _positive_int("MLA attention", "qk_rope_head_dim", self.qk_rope_head_dim)
        _optional_positive_int("MLA attention", "attention_heads", self.attention_heads)

    @property
    def kind(self) -> str:
        """``"mla"``."""
        return "mla"

    def values_per_token_layer(self) -> int:
        """Values cached per token per layer: kv_lora_rank + qk_rope_head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def describe(self) -> str:
        """One line, e.g. ``MLA: latent 512 + RoPE 64 = 576 values``."""
        q = f" ({self.attention_heads} query heads)" if self.attention_heads else ""
        return (
            f"MLA: latent {self.kv_lora_rank} + RoPE {self.qk_rope_head_dim} = "
            f"{self.values_per_token_layer()} values{q}"
        )


#: Either attention layout.
Attention = GQAAttention | MLAAttention


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A model as far as memory is concerned.

    Attributes:
        name: the catalog name (``agentflow plan --model NAME``).
        layers: decoder layers that keep a KV cache.
        attention: the KV layout of every layer.
        total_params: parameters held in GPU memory (all experts of a MoE).
        active_params: parameters used per token (for the record; memory needs all of them).
        weight_dtype: dtype of the served weights (a key of
            :data:`~agentflow.planner.WEIGHT_DTYPES`).
        max_context: the longest context the model supports, in tokens.
        description: one line for humans.
        sources: where each figure comes from, and what is assumed.
    """

    name: str
    layers: int
    attention: Attention
    total_params: int
    active_params: int
    weight_dtype: str
    max_context: int
    description: str = ""
    sources: str = ""

    def __post_init__(self) -> None:
        owner = f"model {self.name!r}"
        _positive_int(owner, "layers", self.layers)
        _instance(owner, "attention", self.attention, (GQAAttention, MLAAttention))
        _positive_int(owner, "total_params", self.total_params)
        _positive_int(owner, "active_params", self.active_params)
        _positive_int(owner, "max_context", self.max_context)
        if self.active_params > self.total_params:
            raise ConfigError(
                f"{owner}: active_params={self.active_params} exceeds "
                f"total_params={self.total_params}"
            )
        weight_dtype_bits(self.weight_dtype)

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights: total_params × bits per parameter / 8 (rounded up)."""
        return math.ceil(self.total_params * weight_dtype_bits(self.weight_dtype) / 8)


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareSpec:
    """A GPU system: memory per GPU and the number of GPUs.

    Two memory figures: the vendor's nominal one, and what the driver leaves visible to
    CUDA — the total vLLM reads (``torch.cuda.mem_get_info``) and multiplies by
    ``gpu_memory_utilization``. The difference is the driver's and the firmware's (ECC,
    page tables, reserved regions): 0.8 GiB on an H100, 10.5 GiB on a GB300 — more than
    the planner's default 5 GiB reserve for everything else. Plans start from the visible
    figure when it is known.

    Attributes:
        name: the catalog name (``agentflow plan --hardware NAME``).
        gpu: the GPU model, e.g. ``"GB300"``.
        gpu_memory_gib: nominal memory per GPU in GiB (2**30 bytes). Vendors' HBM figures
            ("80 GB", "288 GB") are binary capacities: an H100's 80 GB is 80 GiB of HBM3.
        gpus: GPUs in the system.
        gpu_memory_visible_gib: memory per GPU visible to CUDA, in GiB; ``None`` when not
            known (the nominal figure is then used, and the plan says so).
        visible_memory_source: where ``gpu_memory_visible_gib`` comes from.
        description: one line for humans.
        sources: where the figures come from.
    """

    name: str
    gpu: str
    gpu_memory_gib: float
    gpus: int
    gpu_memory_visible_gib: float | None = None
    visible_memory_source: str = ""
    description: str = ""
    sources: str = ""

    def __post_init__(self) -> None:
        owner = f"hardware {self.name!r}"
        _positive_int(owner, "gpus", self.gpus)
        _gib(owner, "gpu_memory_gib", self.gpu_memory_gib, zero=False)
        visible = self.gpu_memory_visible_gib
        if visible is not None:
            _gib(owner, "gpu_memory_visible_gib", visible, zero=False)
            if visible > self.gpu_memory_gib:
                raise ConfigError(
                    f"{owner}: gpu_memory_visible_gib must be > 0 and at most gpu_memory_gib="
                    f"{self.gpu_memory_gib:g}, got {visible!r}"
                )

    @property
    def planned_memory_gib(self) -> float:
        """The memory per GPU a plan starts from: the visible figure, else the nominal one."""
        visible = self.gpu_memory_visible_gib
        return visible if visible is not None else self.gpu_memory_gib


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """A model served on hardware, with the knobs of a vLLM command line.

    Attributes:
        name: the catalog name, or a label for a custom deployment.
        model: what is served.
        hardware: what it runs on.
        tp: ``--tensor-parallel-size``.
        pp: ``--pipeline-parallel-size``; at most the model's layers and
            :data:`MAX_PIPELINE_STAGES`.
        dp: ``--data-parallel-size``: independent replicas, each of ``tp × pp`` GPUs.
        gpus: GPUs available; ``None`` means all of ``hardware.gpus``. More than that
            means several of the hardware (``ceil(gpus / hardware.gpus)`` of them, say two
            8-GPU nodes for 16), planned with a warning. ``tp × pp × dp`` must not exceed it.
        pp_partition: layers per pipeline stage (like ``VLLM_PP_LAYER_PARTITION``); ``None``
            splits them the way vLLM does by default.
        kv_dtype: ``--kv-cache-dtype`` (a key of :data:`~agentflow.planner.KV_DTYPES`).
        gpu_memory_utilization: ``--gpu-memory-utilization``, in (0, 1].
        block_size: tokens per KV block (``--block-size``).
        max_model_len: ``--max-model-len``; ``None`` means the model's ``max_context``. A
            longer one is planned with a warning (vLLM takes it only with
            ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``).
        reserve_gib: GiB per GPU kept for activations, NCCL, the CUDA context and graphs —
            everything inside the utilisation budget that is neither weights nor KV (the
            driver's own share is not in it: it is outside the visible memory).
        description: one line for humans.
        sources: where the configuration comes from.
    """

    name: str
    model: ModelSpec
    hardware: HardwareSpec
    tp: int = 1
    pp: int = 1
    dp: int = 1
    gpus: int | None = None
    pp_partition: tuple[int, ...] | None = None
    kv_dtype: str = "bf16"
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    max_model_len: int | None = None
    reserve_gib: float = DEFAULT_RESERVE_GIB
    description: str = ""
    sources: str = ""

    def __post_init__(self) -> None:
        owner = f"deployment {self.name!r}"
        _instance(owner, "model", self.model, (ModelSpec,))
        _instance(owner, "hardware", self.hardware, (HardwareSpec,))
        for field in ("tp", "pp", "dp", "block_size"):
            _positive_int(owner, field, getattr(self, field))
        _optional_positive_int(owner, "gpus", self.gpus)
        _optional_positive_int(owner, "max_model_len", self.max_model_len)
        kv_dtype_bytes(self.kv_dtype)
        util = self.gpu_memory_utilization
        if isinstance(util, bool) or not (isinstance(util, int | float) and 0 < util <= 1):
            raise ConfigError(f"{owner}: gpu_memory_utilization must be in (0, 1], got {util!r}")
        _gib(owner, "reserve_gib", self.reserve_gib, zero=True)
        if self.pp > MAX_PIPELINE_STAGES:
            raise ConfigError(
                f"{owner}: pp must be at most {MAX_PIPELINE_STAGES} pipeline stages, got "
                f"{_shown(self.pp)}"
            )
        used = self.tp * self.pp * self.dp
        if used > self.gpu_count:
            raise ConfigError(
                f"{owner}: tp × pp × dp = {self.tp} × {self.pp} × {self.dp} = {used} GPUs, "
                f"but gpus={self.gpu_count}"
            )
        if self.pp > self.model.layers:
            raise ConfigError(
                f"{owner}: pp={self.pp} exceeds the model's {self.model.layers} layers "
                "(a pipeline stage would hold no layer)"
            )
        if self.pp_partition is not None:
            parts: object = self.pp_partition
            if isinstance(parts, list):  # (a list made the deployment unhashable)
                parts = tuple(parts)
                object.__setattr__(self, "pp_partition", parts)
            if not isinstance(parts, tuple):
                raise ConfigError(
                    f"{owner}: pp_partition must be a tuple of ints or None, got {parts!r:.80}"
                )
            if len(parts) > MAX_PIPELINE_STAGES:
                raise ConfigError(
                    f"{owner}: pp_partition must have at most {MAX_PIPELINE_STAGES} stages, "
                    f"got {len(parts)}"
                )
            if len(parts) != self.pp:
                raise ConfigError(
                    f"{owner}: pp_partition={list(parts)} has {len(parts)} stages, pp={self.pp}"
                )
            for part in parts:
                _positive_int(owner, "pp_partition entry", part)
            if sum(parts) != self.model.layers:
                raise ConfigError(
                    f"{owner}: pp_partition={list(parts)} sums to {sum(parts)}, "
                    f"the model has {self.model.layers} layers"
                )
        self._check_heads(owner)

    def _check_heads(self, owner: str) -> None:
        attn = self.model.attention
        heads = attn.attention_heads
        if heads is not None and heads % self.tp:
            raise ConfigError(
                f"{owner}: tp={self.tp} does not divide the model's {heads} attention heads "
                "(vLLM requires it)"
            )
        if isinstance(attn, GQAAttention):
            kv, tp = attn.kv_heads, self.tp
            if (tp <= kv and kv % tp) or (tp > kv and tp % kv):
                raise ConfigError(
                    f"{owner}: tp={tp} and the model's {kv} KV heads: one must divide the other "
                    "(vLLM shards KV heads when tp ≤ kv_heads and replicates them when tp > "
                    "kv_heads)"
                )

    @property
    def gpu_count(self) -> int:
        """GPUs available: ``gpus``, or all of the hardware's."""
        return self.gpus if self.gpus is not None else self.hardware.gpus

    @property
    def context_limit(self) -> int:
        """``max_model_len``, or the model's ``max_context`` when unset."""
        return self.max_model_len if self.max_model_len is not None else self.model.max_context
