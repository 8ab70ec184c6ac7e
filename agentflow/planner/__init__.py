"""The KV-cache capacity planner: how many long sessions a deployment holds at once.

A pure calculator — it imports nothing of agentflow's client or simulator, and the simulator's
profiles take their KV capacity from it. Describe a model (:class:`ModelSpec` with
:class:`GQAAttention` or :class:`MLAAttention`), the hardware (:class:`HardwareSpec`) and a
vLLM-style :class:`Deployment`, or take the shipped ones from the catalog, then::

    from agentflow.planner import get_deployment, plan

    p = plan(get_deployment("deepseek-v4.1-flash-gb300"), context_tokens=1_000_000)
    p.kv_bytes_per_token_gpu, p.kv_tokens_total, p.sessions_total

The formulas, the assumptions and a worked example are in ``docs/planner.md``; the command
line is ``agentflow plan`` (:mod:`agentflow.planner.cli`).
"""

from __future__ import annotations

from ._catalog import (
    DEFAULT_DEPLOYMENT,
    DEPLOYMENTS,
    HARDWARE,
    MODELS,
    get_deployment,
    get_hardware,
    get_model,
)
from ._dtypes import KV_DTYPES, WEIGHT_DTYPES, kv_dtype_bytes, weight_dtype_bits
from ._kv import (
    DEFAULT_CONTEXT_TOKENS,
    GIB,
    KVPlan,
    StagePlan,
    kv_bytes_per_token_layer,
    kv_bytes_per_token_layer_gpu,
    kv_heads_per_gpu,
    plan,
    pp_layer_split,
)
from ._render import plan_to_dict, render_plan
from ._specs import (
    DEFAULT_RESERVE_GIB,
    MAX_COUNT,
    MAX_GPU_MEMORY_GIB,
    MAX_PIPELINE_STAGES,
    Attention,
    Deployment,
    GQAAttention,
    HardwareSpec,
    MLAAttention,
    ModelSpec,
)

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_DEPLOYMENT",
    "DEFAULT_RESERVE_GIB",
    "DEPLOYMENTS",
    "GIB",
    "HARDWARE",
    "KV_DTYPES",
    "MAX_COUNT",
    "MAX_GPU_MEMORY_GIB",
    "MAX_PIPELINE_STAGES",
    "MODELS",
    "WEIGHT_DTYPES",
    "Attention",
    "Deployment",
    "GQAAttention",
    "HardwareSpec",
    "KVPlan",
    "MLAAttention",
    "ModelSpec",
    "StagePlan",
    "get_deployment",
    "get_hardware",
    "get_model",
    "kv_bytes_per_token_layer",
    "kv_bytes_per_token_layer_gpu",
    "kv_dtype_bytes",
    "kv_heads_per_gpu",
    "plan",
    "plan_to_dict",
    "pp_layer_split",
    "render_plan",
    "weight_dtype_bits",
]
