"""The arithmetic: KV bytes per token per GPU, memory left for KV, tokens, sessions.

Per layer and token, before any sharding (``b`` = bytes per KV value)::

    GQA/MHA:  2 × kv_heads × head_dim × b                (a key and a value per KV head)
    MLA:      (kv_lora_rank + qk_rope_head_dim) × b      (one latent, shared by all heads)

On one GPU of a TP group (vLLM's ``get_num_kv_heads``)::

    GQA:  heads_per_gpu = max(1, kv_heads // tp)   → 2 × heads_per_gpu × head_dim × b
          (tp > kv_heads: each head is replicated tp / kv_heads times)
    MLA:  the whole latent on every rank           → (kv_lora_rank + qk_rope_head_dim) × b

A pipeline stage holds only its layers, so a GPU of stage ``s`` caches
``layers_s × per_layer_gpu`` bytes per token. Its memory for KV (vLLM's
``requested_memory − non_kv_cache_memory``), from the memory visible to CUDA (the
nominal figure less the driver's share; the nominal one when that is not known)::

    free_s = ceil(visible memory × gpu_memory_utilization) − weights_s − reserve
    weights_s = weight_bytes × layers_s / layers / tp
    blocks_s = free_s // (block_size × layers_s × per_layer_gpu)

vLLM gives every worker the smallest block count (``unify_kv_cache_configs``), so a replica
holds ``min(blocks_s) × block_size`` tokens; DP replicas multiply it. A session of ``C`` tokens
takes ``ceil(C / block_size)`` blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from agentflow._errors import ConfigError

from ._assumptions import assumptions_for
from ._dtypes import kv_dtype_bytes
from ._specs import MAX_COUNT, Attention, Deployment, GQAAttention

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "GIB",
    "KVPlan",
    "StagePlan",
    "kv_bytes_per_token_layer",
    "kv_bytes_per_token_layer_gpu",
    "kv_heads_per_gpu",
    "plan",
    "pp_layer_split",
]

#: Bytes in a GiB.
GIB = 1 << 30

#: The context length sessions are counted at unless told otherwise.
DEFAULT_CONTEXT_TOKENS = 1_000_000


def pp_layer_split(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage, split the way vLLM's ``get_pp_indices`` does by default.

    ``layers // pp`` each; the remainder goes one layer each to the stages before the last,
    starting from the second-to-last (the first and last stages also hold the embedding and
    the LM head). 61 layers over 9 stages: ``(6, 7, 7, 7, 7, 7, 7, 7, 6)``.

    Raises:
        ConfigError: ``pp`` is not in ``1..layers``.
    """
    if pp < 1 or pp > layers:
        raise ConfigError(f"pp={pp} must be between 1 and the model's {layers} layers")
    base, remainder = divmod(layers, pp)
    parts = [base] * pp
    for i in range(2, remainder + 2):
        parts[-i] += 1
    return tuple(parts)


def kv_heads_per_gpu(attention: Attention, tp: int) -> tuple[int, int]:
    """``(KV heads cached per GPU, copies of each head across the TP group)``.

    GQA: ``kv_heads // tp`` heads and 1 copy when ``tp ≤ kv_heads``; otherwise 1 head
    replicated ``tp // kv_heads`` times. MLA: its one latent "head", on all ``tp`` ranks.
    """
    if isinstance(attention, GQAAttention):
        if tp <= attention.kv_heads:
            return attention.kv_heads // tp, 1
        return 1, tp // attention.kv_heads
    return 1, tp


def kv_bytes_per_token_layer(attention: Attention, kv_dtype: str) -> int:
    """KV bytes one token adds to one layer before sharding.

    GQA: ``2 × kv_heads × head_dim × bytes``; MLA: ``(kv_lora_rank + qk_rope_head_dim) × bytes``.
    """
    return attention.values_per_token_layer() * kv_dtype_bytes(kv_dtype)


def kv_bytes_per_token_layer_gpu(attention: Attention, tp: int, kv_dtype: str) -> int:
    """KV bytes one token adds to one layer on one GPU of a TP group of ``tp``.

    GQA: ``2 × heads_per_gpu × head_dim × bytes``; MLA: the whole latent (not sharded).
    """
    if isinstance(attention, GQAAttention):
        heads, _ = kv_heads_per_gpu(attention, tp)
        return 2 * heads * attention.head_dim * kv_dtype_bytes(kv_dtype)
    return kv_bytes_per_token_layer(attention, kv_dtype)


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePlan:
    """One pipeline stage, seen from any one of its GPUs (all TP ranks are alike).

    Attributes:
        stage: the stage index, 0-based.
        layers: layers the stage holds.
        weight_bytes: weight bytes on one GPU of the stage.
        kv_bytes_per_token: KV bytes per token on one GPU of the stage.
        free_kv_bytes: bytes left for KV on one GPU: usable − weights − reserve.
        num_blocks: whole KV blocks that fit in ``free_kv_bytes``.
    """

    stage: int
    layers: int
    weight_bytes: int
    kv_bytes_per_token: int
    free_kv_bytes: int
    num_blocks: int


@dataclass(frozen=True, slots=True, kw_only=True)
class KVPlan:
    """What a deployment's KV cache holds. Byte figures are exact integers.

    Attributes:
        deployment: the deployment planned (after any overrides).
        context_tokens: the session length ``sessions`` is counted at.
        kv_dtype_bytes: bytes per cached value.
        kv_heads_per_gpu: KV heads cached per GPU (MLA: 1, the latent).
        kv_head_copies: copies of each KV head (or of the MLA latent) across a TP group.
        kv_bytes_per_token_layer: bytes per token per layer before sharding.
        kv_bytes_per_token_model: bytes per token over all layers before sharding
            (one copy of everything: the figure model cards quote).
        kv_bytes_per_token_layer_gpu: bytes per token per layer on one GPU.
        kv_bytes_per_token_gpu: bytes per token on one GPU of the bottleneck stage.
        kv_bytes_per_token_replica: bytes per token over all GPUs of a replica, copies included.
        stages: every pipeline stage.
        bottleneck_stage: the stage with the fewest blocks; it decides the replica's capacity.
        nominal_memory_bytes_per_gpu: the GPU's nominal memory (the vendor's figure).
        memory_bytes_per_gpu: the memory the plan starts from: what CUDA sees (the nominal
            figure less the driver's share), or the nominal figure when that is unknown.
        usable_bytes_per_gpu: ``ceil(memory × gpu_memory_utilization)``.
        reserve_bytes_per_gpu: the stated reserve for activations and the rest.
        weight_bytes_total: bytes of all weights (one copy).
        weight_bytes_per_gpu: weight bytes on a GPU of the bottleneck stage.
        free_kv_bytes_per_gpu: bytes for KV on a GPU of the bottleneck stage.
        num_blocks: KV blocks per replica (the same on every GPU of it).
        kv_tokens_per_replica: ``num_blocks × block_size``.
        replicas: DP replicas.
        kv_tokens_total: tokens over all replicas.
        blocks_per_session: ``ceil(context_tokens / block_size)``.
        sessions_per_replica: sessions of ``context_tokens`` one replica holds at once.
        sessions_total: over all replicas.
        max_model_len: the deployment's ``max_model_len``.
        max_model_len_concurrency: ``num_blocks / ceil(max_model_len / block_size)``
            (vLLM's "Maximum concurrency" log line: a request of ``max_model_len`` takes
            whole blocks).
        gpus_used: ``tp × pp × dp``.
        gpus_idle: GPUs of the deployment left unused.
        assumptions: every assumption behind the figures, in words.
        warnings: what the figures say that a user should not miss.
    """

    deployment: Deployment
    context_tokens: int
    kv_dtype_bytes: int
    kv_heads_per_gpu: int
    kv_head_copies: int
    kv_bytes_per_token_layer: int
    kv_bytes_per_token_model: int
    kv_bytes_per_token_layer_gpu: int
    kv_bytes_per_token_gpu: int
    kv_bytes_per_token_replica: int
    stages: tuple[StagePlan, ...]
    bottleneck_stage: int
    nominal_memory_bytes_per_gpu: int
    memory_bytes_per_gpu: int
    usable_bytes_per_gpu: int
    reserve_bytes_per_gpu: int
    weight_bytes_total: int
    weight_bytes_per_gpu: int
    free_kv_bytes_per_gpu: int
    num_blocks: int
    kv_tokens_per_replica: int
    replicas: int
    kv_tokens_total: int
    blocks_per_session: int
    sessions_per_replica: int
    sessions_total: int
    max_model_len: int
    max_model_len_concurrency: float
    gpus_used: int
    gpus_idle: int
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...]


def _bytes(gib: float) -> Fraction:
    return Fraction(str(gib)) * GIB


def plan(deployment: Deployment, *, context_tokens: int | None = None) -> KVPlan:
    """Plan the KV cache of ``deployment`` and count sessions of ``context_tokens``.

    Args:
        deployment: the model, hardware and vLLM settings.
        context_tokens: tokens per session (prompt and output) for the session count;
            ``None`` means :data:`DEFAULT_CONTEXT_TOKENS` (1,000,000), or the deployment's
            ``max_model_len`` when that is shorter. A longer one is counted, with a warning.

    Raises:
        ConfigError: ``context_tokens`` < 1 or > 10¹⁸; the weights and reserve do not fit
            in ``memory × gpu_memory_utilization`` on some GPU (the message names the stage
            and the figures); or not one KV block fits.
    """
    if context_tokens is None:
        context_tokens = min(DEFAULT_CONTEXT_TOKENS, deployment.context_limit)
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int):
        raise ConfigError(f"context_tokens must be an integer, got {context_tokens!r}")
    if context_tokens < 1:
        raise ConfigError(f"context_tokens must be ≥ 1, got {context_tokens}")
    if context_tokens > MAX_COUNT:
        raise ConfigError(f"context_tokens must be at most {MAX_COUNT:.0e}, got a larger one")
    d = deployment
    model, attn = d.model, d.model.attention
    heads, copies = kv_heads_per_gpu(attn, d.tp)
    per_layer = kv_bytes_per_token_layer(attn, d.kv_dtype)
    per_layer_gpu = kv_bytes_per_token_layer_gpu(attn, d.tp, d.kv_dtype)
    partition = d.pp_partition or pp_layer_split(model.layers, d.pp)

    nominal = math.floor(_bytes(d.hardware.gpu_memory_gib))
    memory = math.floor(_bytes(d.hardware.planned_memory_gib))
    usable = math.ceil(memory * Fraction(str(d.gpu_memory_utilization)))
    reserve = math.ceil(_bytes(d.reserve_gib))
    weights_total = model.weight_bytes

    stages: list[StagePlan] = []
    for index, layers in enumerate(partition):
        weights = math.ceil(Fraction(weights_total * layers, model.layers * d.tp))
        free = usable - weights - reserve
        if free <= 0:
            raise ConfigError(
                f"deployment {d.name!r}: the weights do not fit — a GPU of pipeline stage "
                f"{index} ({layers} of {model.layers} layers, tp={d.tp}) holds "
                f"{weights / GIB:.2f} GiB of weights + {reserve / GIB:.2f} GiB reserve, but "
                f"only {usable / GIB:.2f} GiB is usable ({memory / GIB:.2f} GiB × "
                f"gpu_memory_utilization {d.gpu_memory_utilization:g}); KV memory would be "
                f"{free / GIB:.2f} GiB. Raise tp or pp, or use more memory per GPU."
            )
        per_token = layers * per_layer_gpu
        stages.append(
            StagePlan(
                stage=index,
                layers=layers,
                weight_bytes=weights,
                kv_bytes_per_token=per_token,
                free_kv_bytes=free,
                num_blocks=free // (d.block_size * per_token),
            )
        )
    bottleneck = min(stages, key=lambda s: s.num_blocks)
    if bottleneck.num_blocks < 1:
        raise ConfigError(
            f"deployment {d.name!r}: not one KV block fits — stage {bottleneck.stage} has "
            f"{bottleneck.free_kv_bytes} bytes for KV and a block of {d.block_size} tokens "
            f"needs {d.block_size * bottleneck.kv_bytes_per_token} bytes"
        )
    kv_tokens = bottleneck.num_blocks * d.block_size
    blocks_per_session = -(-context_tokens // d.block_size)
    sessions = bottleneck.num_blocks // blocks_per_session
    used = d.tp * d.pp * d.dp

    warnings: list[str] = []
    per_unit = d.hardware.gpus
    if d.gpu_count > per_unit:
        warnings.append(
            f"gpus={d.gpu_count} is more than one {d.hardware.name}'s {per_unit} GPUs: "
            f"{-(-d.gpu_count // per_unit)} of them assumed."
        )
    limit = d.context_limit
    if limit > model.max_context:
        warnings.append(
            f"max_model_len {limit:,} exceeds the model's window of {model.max_context:,} "
            "tokens: vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set, and past "
            "its window the model's output is not to be trusted."
        )
    if kv_tokens < limit:
        warnings.append(
            f"One replica holds {kv_tokens:,} KV tokens, fewer than max_model_len {limit:,}: "
            "vLLM refuses to start (lower --max-model-len or free memory)."
        )
    if context_tokens > limit:
        warnings.append(
            f"Sessions of {context_tokens:,} tokens exceed max_model_len {limit:,}; vLLM "
            "rejects such requests — the session count is what the memory would hold."
        )
    if sessions == 0:
        warnings.append(
            f"Not one session of {context_tokens:,} tokens fits in a replica's "
            f"{kv_tokens:,} KV tokens."
        )
    return KVPlan(
        deployment=d,
        context_tokens=context_tokens,
        kv_dtype_bytes=kv_dtype_bytes(d.kv_dtype),
        kv_heads_per_gpu=heads,
        kv_head_copies=copies,
        kv_bytes_per_token_layer=per_layer,
        kv_bytes_per_token_model=per_layer * model.layers,
        kv_bytes_per_token_layer_gpu=per_layer_gpu,
        kv_bytes_per_token_gpu=bottleneck.kv_bytes_per_token,
        kv_bytes_per_token_replica=per_layer_gpu * model.layers * d.tp,
        stages=tuple(stages),
        bottleneck_stage=bottleneck.stage,
        nominal_memory_bytes_per_gpu=nominal,
        memory_bytes_per_gpu=memory,
        usable_bytes_per_gpu=usable,
        reserve_bytes_per_gpu=reserve,
        weight_bytes_total=weights_total,
        weight_bytes_per_gpu=bottleneck.weight_bytes,
        free_kv_bytes_per_gpu=bottleneck.free_kv_bytes,
        num_blocks=bottleneck.num_blocks,
        kv_tokens_per_replica=kv_tokens,
        replicas=d.dp,
        kv_tokens_total=kv_tokens * d.dp,
        blocks_per_session=blocks_per_session,
        sessions_per_replica=sessions,
        sessions_total=sessions * d.dp,
        max_model_len=limit,
        max_model_len_concurrency=bottleneck.num_blocks / math.ceil(limit / d.block_size),
        gpus_used=used,
        gpus_idle=d.gpu_count - used,
        assumptions=assumptions_for(d, partition),
        warnings=tuple(warnings),
    )
