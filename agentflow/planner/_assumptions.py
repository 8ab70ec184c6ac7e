"""Every assumption behind a plan, written out for the deployment at hand.

The planner is arithmetic on stated inputs; these sentences are the inputs it did not get
from the user, and the rules it borrowed from vLLM, so that a reader can check or override
each one. They go into :attr:`KVPlan.assumptions` and are printed with every plan.
"""

from __future__ import annotations

from ._dtypes import kv_dtype_bytes, weight_dtype_bits
from ._specs import Deployment, GQAAttention

__all__ = ["assumptions_for"]


def _count(n: int) -> str:
    """552_000_000_000 → '552B'; 32_500_000_000 → '32.5B'."""
    for div, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M")):
        if n >= div:
            return f"{n / div:.4g}{suffix}"
    return f"{n:,}"


def _attention(d: Deployment) -> str:
    attn, tp = d.model.attention, d.tp
    if isinstance(attn, GQAAttention):
        if tp <= attn.kv_heads:
            shard = (
                f"tp={tp} shards the {attn.kv_heads} KV heads: {attn.kv_heads // tp} per GPU, "
                "no copies"
            )
        else:
            shard = (
                f"tp={tp} exceeds the {attn.kv_heads} KV heads: each GPU keeps 1 head and every "
                f"head is replicated {tp // attn.kv_heads}× (vLLM's max(1, kv_heads // tp))"
            )
        return (
            f"{attn.describe()}: each layer caches a key and a value of {attn.head_dim} values "
            f"per KV head per token; {shard}."
        )
    return (
        f"{attn.describe()}: each layer caches one latent of {attn.values_per_token_layer()} "
        "values per token (vLLM: MLAAttentionSpec with num_kv_heads=1, head_size = "
        "kv_lora_rank + qk_rope_head_dim). Tensor parallelism splits the query heads, not the "
        f"latent: all {tp} TP ranks keep the whole latent ({tp} copies)."
    )


def _visible(d: Deployment) -> str:
    hw = d.hardware
    if hw.gpu_memory_visible_gib is None:
        return (
            f"Visible memory: not known for {hw.name}, so the nominal {hw.gpu_memory_gib:g} GiB "
            "is planned with; the driver keeps part of it (0.8 GiB on an H100, 10.5 GiB on a "
            "GB300), so capacity is overstated by that much — pass --gpu-visible-gib with the "
            "total_gpu_memory vLLM logs."
        )
    kept = hw.gpu_memory_gib - hw.gpu_memory_visible_gib
    note = f", more than the whole {d.reserve_gib:g} GiB reserve" if kept > d.reserve_gib else ""
    return (
        f"Visible memory: {hw.gpu_memory_visible_gib:.2f} GiB per GPU is what CUDA sees and "
        f"vLLM plans with; the driver and firmware keep the other {kept:.2f} GiB of the "
        f"nominal {hw.gpu_memory_gib:g}{note}. {hw.visible_memory_source}"
    )


def assumptions_for(d: Deployment, partition: tuple[int, ...]) -> tuple[str, ...]:
    """The assumptions behind planning ``d`` with ``partition`` layers per pipeline stage."""
    m, hw = d.model, d.hardware
    kv_bytes = kv_dtype_bytes(d.kv_dtype)
    scale_note = (
        " (fp8 scales are per layer, not per token)" if d.kv_dtype.startswith("fp8") else ""
    )
    split = "as given" if d.pp_partition else "split like vLLM's default get_pp_indices"
    lines = [
        f"Model: {m.description or m.name}. {m.sources}".strip(),
        f"Hardware: {hw.description or hw.name}; {hw.gpu_memory_gib:g} GiB per GPU nominal "
        "(vendor HBM figures are binary). " + hw.sources,
        _visible(d),
        f"Deployment: {d.description or d.name}. {d.sources}".strip(),
        _attention(d),
        f"KV dtype {d.kv_dtype}: {kv_bytes} byte(s) per value{scale_note}; no other per-token "
        "KV state is counted.",
        f"Weights: {_count(m.total_params)} parameters × {weight_dtype_bits(m.weight_dtype)} "
        f"bits ({m.weight_dtype}), all resident (MoE experts included); quantisation scales "
        "not counted. Each pipeline stage holds weights in proportion to its layers, split "
        "evenly over its TP ranks (embeddings, LM head and replicated norms are not modelled "
        "apart).",
        f"Pipeline: {m.layers} layers over pp={d.pp} stages, {split}: {list(partition)}. "
        "Every worker gets the same number of KV blocks (vLLM's unify_kv_cache_configs takes "
        "the smallest), so the stage with the most layers per GPU memory decides capacity.",
        f"Memory per GPU for KV = ceil({hw.planned_memory_gib:.2f} GiB "
        f"{'visible' if hw.gpu_memory_visible_gib is not None else 'nominal'} × "
        f"gpu_memory_utilization {d.gpu_memory_utilization:g}) − weights − a reserve of "
        f"{d.reserve_gib:g} GiB (activation peak, NCCL buffers, CUDA context and graphs — vLLM "
        "measures these at startup; pass --reserve-gib with the figure from its log).",
        f"Capacity is whole blocks of {d.block_size} tokens; a session of C tokens takes "
        f"ceil(C / {d.block_size}) blocks.",
        f"Data parallelism: dp={d.dp} independent replicas, each with all the weights and its "
        "own KV cache; expert parallelism and data-parallel attention are not modelled.",
        "Sessions are counted as if none shared a KV block; with prefix caching, sessions that "
        "share a prefix hold it once, so more fit.",
    ]
    return tuple(lines)
