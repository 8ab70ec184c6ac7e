"""Plans and catalogs as text for people and as JSON-ready dicts for programs.

:func:`plan_to_dict` keeps every figure exact (bytes and tokens as integers); :func:`render_plan`
shows the same figures with units, the memory budget of the bottleneck GPU line by line, every
pipeline stage, and the assumptions and warnings in full.
"""

from __future__ import annotations

import textwrap
from typing import Any

from ._catalog import DEFAULT_DEPLOYMENT, DEPLOYMENTS, HARDWARE, MODELS
from ._kv import GIB, KVPlan
from ._specs import Deployment, GQAAttention, HardwareSpec, ModelSpec

__all__ = [
    "catalog_to_dict",
    "deployment_to_dict",
    "hardware_to_dict",
    "model_to_dict",
    "plan_to_dict",
    "render_catalog",
    "render_plan",
]


def model_to_dict(model: ModelSpec) -> dict[str, Any]:
    """A model spec as plain JSON types."""
    attn = model.attention
    attention: dict[str, Any]
    if isinstance(attn, GQAAttention):
        attention = {"kind": "gqa", "kv_heads": attn.kv_heads, "head_dim": attn.head_dim}
    else:
        attention = {
            "kind": "mla",
            "kv_lora_rank": attn.kv_lora_rank,
            "qk_rope_head_dim": attn.qk_rope_head_dim,
        }
    attention["attention_heads"] = attn.attention_heads
    return {
        "name": model.name,
        "layers": model.layers,
        "attention": attention,
        "total_params": model.total_params,
        "active_params": model.active_params,
        "weight_dtype": model.weight_dtype,
        "max_context": model.max_context,
        "description": model.description,
        "sources": model.sources,
    }


def hardware_to_dict(hardware: HardwareSpec) -> dict[str, Any]:
    """A hardware spec as plain JSON types."""
    return {
        "name": hardware.name,
        "gpu": hardware.gpu,
        "gpu_memory_gib": hardware.gpu_memory_gib,
        "gpu_memory_visible_gib": hardware.gpu_memory_visible_gib,
        "visible_memory_source": hardware.visible_memory_source,
        "gpus": hardware.gpus,
        "description": hardware.description,
        "sources": hardware.sources,
    }


def deployment_to_dict(deployment: Deployment) -> dict[str, Any]:
    """A deployment as plain JSON types, with its model and hardware in full."""
    d = deployment
    return {
        "name": d.name,
        "model": model_to_dict(d.model),
        "hardware": hardware_to_dict(d.hardware),
        "tp": d.tp,
        "pp": d.pp,
        "dp": d.dp,
        "gpus": d.gpu_count,
        "pp_partition": list(d.pp_partition) if d.pp_partition else None,
        "kv_dtype": d.kv_dtype,
        "gpu_memory_utilization": d.gpu_memory_utilization,
        "block_size": d.block_size,
        "max_model_len": d.context_limit,
        "reserve_gib": d.reserve_gib,
        "description": d.description,
        "sources": d.sources,
    }


def plan_to_dict(plan: KVPlan) -> dict[str, Any]:
    """A plan as plain JSON types: ``deployment``, ``results``, ``stages``, the words."""
    results = {
        "context_tokens": plan.context_tokens,
        "kv_dtype_bytes": plan.kv_dtype_bytes,
        "kv_heads_per_gpu": plan.kv_heads_per_gpu,
        "kv_head_copies": plan.kv_head_copies,
        "kv_bytes_per_token_layer": plan.kv_bytes_per_token_layer,
        "kv_bytes_per_token_model": plan.kv_bytes_per_token_model,
        "kv_bytes_per_token_layer_gpu": plan.kv_bytes_per_token_layer_gpu,
        "kv_bytes_per_token_gpu": plan.kv_bytes_per_token_gpu,
        "kv_bytes_per_token_replica": plan.kv_bytes_per_token_replica,
        "bottleneck_stage": plan.bottleneck_stage,
        "nominal_memory_bytes_per_gpu": plan.nominal_memory_bytes_per_gpu,
        "memory_bytes_per_gpu": plan.memory_bytes_per_gpu,
        "usable_bytes_per_gpu": plan.usable_bytes_per_gpu,
        "reserve_bytes_per_gpu": plan.reserve_bytes_per_gpu,
        "weight_bytes_total": plan.weight_bytes_total,
        "weight_bytes_per_gpu": plan.weight_bytes_per_gpu,
        "free_kv_bytes_per_gpu": plan.free_kv_bytes_per_gpu,
        "num_blocks": plan.num_blocks,
        "kv_tokens_per_replica": plan.kv_tokens_per_replica,
        "replicas": plan.replicas,
        "kv_tokens_total": plan.kv_tokens_total,
        "blocks_per_session": plan.blocks_per_session,
        "sessions_per_replica": plan.sessions_per_replica,
        "sessions_total": plan.sessions_total,
        "max_model_len": plan.max_model_len,
        "max_model_len_concurrency": plan.max_model_len_concurrency,
        "gpus_used": plan.gpus_used,
        "gpus_idle": plan.gpus_idle,
    }
    stages = [
        {
            "stage": s.stage,
            "layers": s.layers,
            "weight_bytes": s.weight_bytes,
            "kv_bytes_per_token": s.kv_bytes_per_token,
            "free_kv_bytes": s.free_kv_bytes,
            "num_blocks": s.num_blocks,
        }
        for s in plan.stages
    ]
    return {
        "deployment": deployment_to_dict(plan.deployment),
        "results": results,
        "stages": stages,
        "assumptions": list(plan.assumptions),
        "warnings": list(plan.warnings),
    }


def _gib(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


def _b(n: int) -> str:
    if n >= 1024:
        return f"{n:,} B ({n / 1024:,.2f} KiB)"
    return f"{n:,} B"


def _count(n: int) -> str:
    for div, suffix in ((10**9, "B"), (10**6, "M")):
        if n >= div:
            return f"{n / div:.4g}{suffix}"
    return f"{n:,}"


def _wrap(text: str, bullet: str) -> str:
    return textwrap.fill(
        text, width=100, initial_indent=bullet, subsequent_indent=" " * len(bullet)
    )


def _rows(rows: list[tuple[str, str]], indent: str = "  ") -> list[str]:
    width = max(len(k) for k, _ in rows)
    return [f"{indent}{k.ljust(width)}  {v}" for k, v in rows]


def _memory_words(hw: HardwareSpec) -> str:
    """``288 GiB nominal, 277.55 GiB visible to CUDA`` (or only the nominal figure)."""
    if hw.gpu_memory_visible_gib is None:
        return f"{hw.gpu_memory_gib:g} GiB (nominal)"
    return f"{hw.gpu_memory_gib:g} GiB nominal, {hw.gpu_memory_visible_gib:.2f} GiB visible to CUDA"


def render_plan(plan: KVPlan) -> str:
    """The plan as a text report (ends with a newline)."""
    d, m, hw = plan.deployment, plan.deployment.model, plan.deployment.hardware
    bottleneck = plan.stages[plan.bottleneck_stage]
    layers = [s.layers for s in plan.stages]
    where = f"stage {bottleneck.stage}, {bottleneck.layers} layers"
    copies = f"{plan.kv_head_copies} cop{'y' if plan.kv_head_copies == 1 else 'ies'} across TP"
    if isinstance(m.attention, GQAAttention):
        sharding = f"{plan.kv_heads_per_gpu} of {m.attention.kv_heads} KV heads per GPU, {copies}"
    else:
        sharding = f"the whole latent on every GPU, {copies}"
    out = [f"KV capacity plan — {d.name}"]
    if d.description:
        out.append(f"  {d.description}")
    out += ["", "Deployment"]
    out += _rows(
        [
            ("model", f"{m.name}: {m.layers} layers; {m.attention.describe()}"),
            (
                "",
                f"{_count(m.total_params)} parameters ({_count(m.active_params)} active), "
                f"{m.weight_dtype} weights",
            ),
            ("hardware", f"{hw.name}: {d.gpu_count} × {hw.gpu}, {_memory_words(hw)} each"),
            (
                "parallelism",
                f"TP {d.tp} × PP {d.pp} × DP {d.dp} = {plan.gpus_used} of {d.gpu_count} "
                f"GPUs ({plan.gpus_idle} idle); layers per stage {layers}",
            ),
            (
                "KV cache",
                f"{d.kv_dtype} ({plan.kv_dtype_bytes} B/value), blocks of {d.block_size} "
                f"tokens, max_model_len {plan.max_model_len:,}",
            ),
        ]
    )
    out += ["", "KV bytes per token"]
    out += _rows(
        [
            ("per layer, unsharded", _b(plan.kv_bytes_per_token_layer)),
            ("all layers, one copy", _b(plan.kv_bytes_per_token_model)),
            ("per layer on one GPU", f"{_b(plan.kv_bytes_per_token_layer_gpu)} — {sharding}"),
            (f"per GPU ({where})", _b(plan.kv_bytes_per_token_gpu)),
            ("per replica, copies included", _b(plan.kv_bytes_per_token_replica)),
        ]
    )
    out += ["", f"Memory of one GPU ({where})"]
    nominal, memory = plan.nominal_memory_bytes_per_gpu, plan.memory_bytes_per_gpu
    if hw.gpu_memory_visible_gib is not None:
        head = [
            ("nominal memory", _gib(nominal)),
            ("− kept by the driver, not visible", _gib(nominal - memory)),
            ("= visible to CUDA", _gib(memory)),
        ]
    else:
        head = [("memory (nominal; visible unknown)", _gib(memory))]
    out += _rows(
        [
            *head,
            (
                f"× gpu_memory_utilization {d.gpu_memory_utilization:g}",
                _gib(plan.usable_bytes_per_gpu),
            ),
            (
                "− weights",
                f"{_gib(plan.weight_bytes_per_gpu)} (all: {_gib(plan.weight_bytes_total)})",
            ),
            ("− reserve", _gib(plan.reserve_bytes_per_gpu)),
            ("= for KV", f"{_gib(plan.free_kv_bytes_per_gpu)} ({plan.free_kv_bytes_per_gpu:,} B)"),
        ]
    )
    if len(plan.stages) > 1:
        out += ["", "Pipeline stages (one GPU each)"]
        out.append("  stage  layers  weights GiB  KV GiB  KV B/token      blocks")
        for s in plan.stages:
            mark = "  ← bottleneck" if s.stage == plan.bottleneck_stage else ""
            out.append(
                f"  {s.stage:>5}  {s.layers:>6}  {s.weight_bytes / GIB:>11.2f}  "
                f"{s.free_kv_bytes / GIB:>6.2f}  {s.kv_bytes_per_token:>10,}  "
                f"{s.num_blocks:>10,}{mark}"
            )
    out += ["", "Capacity"]
    out += _rows(
        [
            ("KV blocks per replica", f"{plan.num_blocks:,}"),
            ("KV tokens per replica", f"{plan.kv_tokens_per_replica:,}"),
            ("replicas (DP)", f"{plan.replicas}"),
            ("KV tokens in all", f"{plan.kv_tokens_total:,}"),
            (
                f"max_model_len {plan.max_model_len:,} concurrency",
                f"{plan.max_model_len_concurrency:,.2f}× per replica",
            ),
        ]
    )
    out += ["", f"Sessions of {plan.context_tokens:,} tokens"]
    out += _rows(
        [
            ("blocks per session", f"{plan.blocks_per_session:,}"),
            ("per replica", f"{plan.sessions_per_replica:,}"),
            ("in all", f"{plan.sessions_total:,}"),
        ]
    )
    out += ["", "Assumptions"]
    out += [_wrap(line, "  - ") for line in plan.assumptions]
    if plan.warnings:
        out += ["", "Warnings"]
        out += [_wrap(line, "  ! ") for line in plan.warnings]
    return "\n".join(out) + "\n"


def catalog_to_dict() -> dict[str, Any]:
    """Every shipped model, hardware and deployment as plain JSON types."""
    return {
        "models": [model_to_dict(m) for m in MODELS.values()],
        "hardware": [hardware_to_dict(h) for h in HARDWARE.values()],
        "deployments": [deployment_to_dict(d) for d in DEPLOYMENTS.values()],
        "default_deployment": DEFAULT_DEPLOYMENT,
    }


def render_catalog() -> str:
    """The shipped specs as text: one line each, the default deployment marked."""
    out = ["Models (--model)"]
    out += _rows([(m.name, m.description) for m in MODELS.values()])
    out += ["", "Hardware (--hardware)"]
    out += _rows([(h.name, h.description) for h in HARDWARE.values()])
    out += ["", "Deployments (--deployment; * = the default)"]
    out += _rows(
        [
            (("* " if d.name == DEFAULT_DEPLOYMENT else "  ") + d.name, d.description)
            for d in DEPLOYMENTS.values()
        ],
        indent="",
    )
    return "\n".join(out) + "\n"
