"""The dtypes the planner knows: bits per value for the KV cache and for the weights.

Names follow vLLM's ``--dtype`` / ``--kv-cache-dtype`` spellings (and the torch aliases);
:data:`KV_DTYPES` and :data:`WEIGHT_DTYPES` map each to its width in bits, and an unknown
name is a :class:`~agentflow.ConfigError` listing the known ones.
"""

from __future__ import annotations

from agentflow._errors import ConfigError

__all__ = ["KV_DTYPES", "WEIGHT_DTYPES", "kv_dtype_bytes", "weight_dtype_bits"]

#: Bits per cached value for each KV-cache dtype (vLLM's ``--kv-cache-dtype`` names and the
#: torch aliases). vLLM stores every fp8 variant as one byte (its ``STR_DTYPE_TO_TORCH_DTYPE``
#: maps ``fp8``, ``fp8_e4m3`` and ``fp8_e5m2`` to ``torch.uint8``); per-tensor fp8 scales are
#: one per layer, not per token, so they add nothing per token.
KV_DTYPES: dict[str, int] = {
    "fp32": 32,
    "float32": 32,
    "float": 32,
    "bf16": 16,
    "bfloat16": 16,
    "fp16": 16,
    "float16": 16,
    "half": 16,
    "fp8": 8,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
}

#: Bits per parameter for each weight dtype. Quantisation scales (e.g. one fp32 per 128×128
#: block of DeepSeek-V3's fp8 weights, +0.02%) are not counted.
WEIGHT_DTYPES: dict[str, int] = {
    **KV_DTYPES,
    "int8": 8,
    "int4": 4,
    "fp4": 4,
    "nvfp4": 4,
    "mxfp4": 4,
}


def _lookup_dtype(table: dict[str, int], value: str, field: str) -> int:
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be a dtype name (a string), got {value!r}")
    try:
        return table[value.lower()]
    except KeyError:
        known = ", ".join(sorted(table))
        raise ConfigError(f"{field}={value!r} is not a known dtype; known: {known}") from None


def kv_dtype_bytes(name: str) -> int:
    """Bytes per cached value for the KV-cache dtype ``name`` (e.g. ``"fp8_e4m3"`` → 1).

    Raises:
        ConfigError: unknown dtype (the message lists the known ones).
    """
    return _lookup_dtype(KV_DTYPES, name, "kv_dtype") // 8


def weight_dtype_bits(name: str) -> int:
    """Bits per parameter for the weight dtype ``name`` (e.g. ``"bf16"`` → 16, ``"fp4"`` → 4).

    Raises:
        ConfigError: unknown dtype (the message lists the known ones).
    """
    return _lookup_dtype(WEIGHT_DTYPES, name, "weight_dtype")
