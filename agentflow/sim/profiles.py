"""Serving profiles: what one simulated deployment can hold and how fast it steps.

A :class:`Profile` is a plain data record: the scheduler limits a vLLM deployment is
started with (``block_size``, ``max_num_seqs``, ``max_model_len``,
``max_num_batched_tokens``), its KV-cache capacity, and a timing model for one engine
step. Every figure says where it came from in ``sources``: a stated per-agent speed
is someone's claim; the KV capacity of each deployment profile is computed by the KV
planner (:mod:`agentflow.planner`) from a shipped deployment; the timing figures are
estimates written down with their arithmetic, to be replaced by measurements.

The timing model of one engine step (one forward pass over the whole batch)::

    step_s = decode_base_s
           + decode_per_seq_s        × (sequences decoding in the step)
           + decode_per_ctx_token_s  × (Σ context tokens those sequences attend)
           + prefill tokens in the step / prefill_tps
           + prefill_per_ctx_token_s × (Σ over prefill tokens of the context each attends)

``decode_base_s`` is derived, not stated: it is chosen so that one sequence alone,
attending ``calibration_context_tokens`` tokens, decodes at exactly
``per_agent_tps`` tokens/s — the "per-agent speed at low concurrency" that serving
reports quote.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentflow._counts import check_count
from agentflow._errors import ConfigError
from agentflow.planner import KVPlan, get_deployment, plan

__all__ = ["PROFILES", "Profile", "UnknownProfileError", "get_profile", "profile_names"]


def _as_float(value: object) -> float:
    """``value`` as a float when it is a number (an int or a float, not a bool); NaN for
    anything else and for an int too large for a float, so that every range check fails."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.nan


def _shown(value: object) -> str:
    """``repr(value)``, or the length of an int too long to print."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an int of {value.bit_length()} bits"
    return repr(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """One simulated deployment: its limits and its step-time model.

    Attributes:
        name: the registry name (``agentflow sim --profile NAME``).
        model: the model id the server advertises in ``/v1/models``.
        description: one line for humans.
        block_size: tokens per KV block; the prefix cache hashes whole blocks (vLLM: 16).
        kv_capacity_tokens: KV-cache capacity in tokens; the engine has
            ``kv_capacity_tokens // block_size`` blocks.
        max_num_seqs: most sequences running (in the batch) at once.
        max_model_len: most tokens (prompt + output) in one sequence.
        max_num_batched_tokens: per-step token budget shared by decodes (one token each)
            and prefill chunks (chunked prefill).
        prefill_tps: prompt tokens computed per second (the linear part of prefill).
        prefill_per_ctx_token_s: seconds per (prefill token × context token it attends):
            the quadratic attention part of prefill. 0 turns it off.
        per_agent_tps: output tokens/s of one sequence decoding alone (at
            ``calibration_context_tokens`` of context); ``decode_base_s`` is derived from it.
        calibration_context_tokens: the context length at which ``per_agent_tps`` holds.
        decode_per_seq_s: seconds a step grows per decoding sequence in the batch.
        decode_per_ctx_token_s: seconds a step grows per context token attended by the
            decoding sequences (reading their KV).
        sources: where each figure comes from, in words.
    """

    name: str
    model: str
    description: str
    block_size: int = 16
    kv_capacity_tokens: int
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    prefill_tps: float
    prefill_per_ctx_token_s: float = 0.0
    per_agent_tps: float
    calibration_context_tokens: int = 0
    decode_per_seq_s: float
    decode_per_ctx_token_s: float
    sources: str

    def __post_init__(self) -> None:
        """Checks every figure; the error (a :class:`~agentflow.ConfigError`, also a
        ``ValueError``) names the field. A figure must be an int or a float (not a bool, a
        string or ``None``). NaN and infinity are refused: an infinite step would stop the
        engine's clock for good, a NaN one would make every time null."""
        for fname in (
            "block_size",
            "kv_capacity_tokens",
            "max_num_seqs",
            "max_model_len",
            "max_num_batched_tokens",
        ):
            check_count(getattr(self, fname), f"profile {self.name!r}: {fname}")
        if self.kv_capacity_tokens // self.block_size * self.block_size < self.max_model_len:
            raise self._bad(
                f"the KV cache ({self.kv_capacity_tokens} tokens) cannot "
                f"hold one sequence of max_model_len={self.max_model_len} tokens"
            )
        for fname in ("prefill_tps", "per_agent_tps"):
            value = getattr(self, fname)
            if not (0 < _as_float(value) < math.inf):  # written so that NaN fails too
                raise self._bad(f"{fname} must be a finite number > 0, got {_shown(value)}")
        for fname in ("prefill_per_ctx_token_s", "decode_per_seq_s", "decode_per_ctx_token_s"):
            value = getattr(self, fname)
            if not (0 <= _as_float(value) < math.inf):
                raise self._bad(
                    f"{fname} must be a finite number ≥ 0 (a per-unit step cost), "
                    f"got {_shown(value)}"
                )
        check_count(
            self.calibration_context_tokens, f"profile {self.name!r}: calibration_context_tokens", 0
        )
        if not (self.decode_base_s > 0):
            raise self._bad(
                f"per-sequence and context costs exceed the single-agent "
                f"step time 1/{self.per_agent_tps} s; lower them"
            )
        n, ctx = self.max_num_seqs, self.max_model_len
        worst = self.step_s(
            n, n * ctx, self.max_num_batched_tokens, self.max_num_batched_tokens * ctx
        )
        if not (worst < math.inf):
            raise self._bad(
                "the step-time figures overflow: a full batch's step would take forever"
            )

    def _bad(self, what: str) -> ConfigError:
        return ConfigError(f"profile {self.name!r}: {what}")

    @property
    def num_blocks(self) -> int:
        """KV-cache capacity in whole blocks."""
        return self.kv_capacity_tokens // self.block_size

    @property
    def decode_base_s(self) -> float:
        """Fixed cost of one step (weights read, launch overheads), in seconds.

        Derived so that ``decode_step_s(1, calibration_context_tokens)`` is exactly
        ``1 / per_agent_tps``.
        """
        return (
            1.0 / self.per_agent_tps
            - self.decode_per_seq_s
            - self.decode_per_ctx_token_s * self.calibration_context_tokens
        )

    def decode_step_s(self, num_seqs: int, context_tokens: int) -> float:
        """Duration of a decode-only step, in seconds.

        Args:
            num_seqs: sequences decoding in the step.
            context_tokens: Σ of the context each attends (its tokens so far, itself included).
        """
        return (
            self.decode_base_s
            + self.decode_per_seq_s * num_seqs
            + self.decode_per_ctx_token_s * context_tokens
        )

    def step_s(
        self,
        num_decode_seqs: int,
        decode_context_tokens: int,
        prefill_tokens: int,
        prefill_context_pairs: int,
    ) -> float:
        """Duration of one engine step mixing decodes and prefill chunks, in seconds.

        Args:
            num_decode_seqs: sequences decoding one token in the step.
            decode_context_tokens: Σ of the context those sequences attend.
            prefill_tokens: prompt tokens computed in the step (cached tokens excluded).
            prefill_context_pairs: Σ over those tokens of the context each attends
                (for a chunk of ``n`` tokens after ``c`` computed ones: ``n·c + n(n+1)/2``).
        """
        return (
            self.decode_base_s
            + self.decode_per_seq_s * num_decode_seqs
            + self.decode_per_ctx_token_s * decode_context_tokens
            + prefill_tokens / self.prefill_tps
            + self.prefill_per_ctx_token_s * prefill_context_pairs
        )


# --- The registry -------------------------------------------------------------------------

_GB300_RACK = (
    "Hardware (an assumption, not a measurement): one GB300 NVL72 rack, 72 GPUs × 288 GB "
    "HBM3e, ~8 TB/s HBM bandwidth and ~5 PFLOP/s dense FP8 per GPU, served as one vLLM "
    "engine with the report's command (TP 8 × PP 9, fp8 KV, gpu_memory_utilization 0.95); "
    "the engine is modelled as one scheduler over the whole rack."
)


def _kv_from_planner(deployment: str) -> tuple[int, str]:
    """The planned KV capacity of a shipped deployment, and a sentence saying how it was got."""
    p: KVPlan = plan(get_deployment(deployment))
    d = p.deployment
    stage = p.stages[p.bottleneck_stage]
    words = (
        f"KV capacity {p.kv_tokens_total:,} tokens: agentflow.planner's plan of deployment "
        f"{d.name!r} (docs/planner.md) — {d.model.attention.describe()} × {d.model.layers} "
        f"layers in {d.kv_dtype} = {p.kv_bytes_per_token_model:,} B/token; TP {d.tp} × PP "
        f"{d.pp} leaves {p.kv_bytes_per_token_gpu:,} B/token on a GPU of the busiest stage "
        f"({stage.layers} layers, {p.kv_head_copies} cop"
        f"{'y' if p.kv_head_copies == 1 else 'ies'} across TP), and "
        f"{p.free_kv_bytes_per_gpu / 2**30:.1f} GiB for KV on it ("
        f"{p.memory_bytes_per_gpu / 2**30:.2f} GiB visible to CUDA (nominal "
        f"{d.hardware.gpu_memory_gib:g} GiB) × {d.gpu_memory_utilization:g} − "
        f"{p.weight_bytes_per_gpu / 2**30:.2f} GiB of weights − a {d.reserve_gib:g} GiB reserve)."
    )
    return p.kv_tokens_total, words


_FLASH_KV, _FLASH_KV_WORDS = _kv_from_planner("deepseek-v4.1-flash-gb300")
_V4_KV, _V4_KV_WORDS = _kv_from_planner("deepseek-v4-gb300")
_QWEN_KV, _QWEN_KV_WORDS = _kv_from_planner("qwen2.5-coder-32b-gb300-tp8")

# One number per deployment: each profile's max_model_len is its planner deployment's
# --max-model-len (the report's command says 1000000 for V4.1 Flash), the same figure
# agentflow.context's window table gives for the model.
_FLASH_LEN = get_deployment("deepseek-v4.1-flash-gb300").context_limit
_V4_LEN = get_deployment("deepseek-v4-gb300").context_limit
_QWEN_LEN = get_deployment("qwen2.5-coder-32b-gb300-tp8").context_limit

_DEEPSEEK_V41_FLASH = Profile(
    name="deepseek-v4.1-flash-gb300",
    model="deepseek-v4.1-flash",
    description="DeepSeek V4.1 Flash (16B active / 552B MoE, 1M context) on a GB300 NVL72 rack",
    kv_capacity_tokens=_FLASH_KV,
    max_num_seqs=1024,
    max_model_len=_FLASH_LEN,
    max_num_batched_tokens=16_384,
    prefill_tps=1_000_000.0,
    prefill_per_ctx_token_s=5e-11,
    per_agent_tps=848.0,
    calibration_context_tokens=4096,
    decode_per_seq_s=2e-6,
    decode_per_ctx_token_s=1e-10,
    sources=(
        "per_agent_tps=848 tok/s at low concurrency: a third-party report's claim, as issue 3 "
        "states it; not verified here. 16B active / 552B total: the same report; "
        "max_model_len 1,000,000: its vLLM command's --max-model-len 1000000 (the planner's "
        "deployment of the same name). "
        + _GB300_RACK
        + " "
        + _FLASH_KV_WORDS
        + " Decode: 2 µs per sequence (MoE routing and more experts touched as the batch "
        "grows) and 0.1 ns per attended token (35 KB read at ≈360 TB/s rack bandwidth); "
        "1024 sequences at 50k context ≈ 8 ms/step ≈ 120 tok/s each. Prefill: 2×16e9 FLOP/token "
        "at 30% of the rack's FP8 ≈ 3.4M tok/s, of which one engine's chunks get ≈1M tok/s; "
        "attention 5e-11 s per token pair assumes the 1M window comes with sparse/compressed "
        "attention (dense MLA would be ≈3× that). Timing figures are estimates, to be "
        "replaced by measurements."
    ),
)

_DEEPSEEK_V4 = Profile(
    name="deepseek-v4-gb300",
    model="deepseek-v4",
    description="DeepSeek V4 (37B active / 671B MoE, 128k context) on a GB300 NVL72 rack",
    kv_capacity_tokens=_V4_KV,
    max_num_seqs=1024,
    max_model_len=_V4_LEN,
    max_num_batched_tokens=16_384,
    prefill_tps=450_000.0,
    prefill_per_ctx_token_s=1.4e-10,
    per_agent_tps=596.0,
    calibration_context_tokens=4096,
    decode_per_seq_s=3e-6,
    decode_per_ctx_token_s=1e-10,
    sources=(
        "per_agent_tps=596 tok/s and 37B active / 671B total, 128k window: as issue 3 states "
        "them (a third-party figure; not verified here). "
        + _GB300_RACK
        + " "
        + _V4_KV_WORDS
        + " Decode: 3 µs per sequence, 0.1 ns per "
        "attended token (as the Flash profile). Prefill: 2×37e9 FLOP/token at 30% of the "
        "rack's FP8 ≈ 1.5M tok/s, of which one engine's chunks get ≈0.45M tok/s; dense MLA "
        "prefill attention ≈5 MFLOP per token pair (128 heads × (192+128) × 2 × 61 layers) at "
        "≈36 PFLOP/s ≈ 1.4e-10 s. Timing figures are estimates, to be replaced by measurements."
    ),
)

_QWEN_CODER_32B = Profile(
    name="qwen2.5-coder-32b",
    model="qwen2.5-coder-32b",
    description="Qwen2.5-Coder-32B-Instruct (dense, 128k context with YaRN), TP=8 on one node",
    kv_capacity_tokens=_QWEN_KV,
    max_num_seqs=256,
    max_model_len=_QWEN_LEN,
    max_num_batched_tokens=8192,
    prefill_tps=120_000.0,
    prefill_per_ctx_token_s=1.6e-10,
    per_agent_tps=410.0,
    calibration_context_tokens=4096,
    decode_per_seq_s=1e-5,
    decode_per_ctx_token_s=6.6e-9,
    sources=(
        "per_agent_tps=410 tok/s: as issue 3 states it (not verified here; fast for a dense "
        "32B model, so fast hardware and FP8 weights are implied). Architecture from the "
        "model card: 64 layers, 8 KV heads × 128 dims (GQA), 32k native window extended to "
        "128k with YaRN. Hardware (an assumption): 8 GB300 GPUs (288 GB each), TP=8. "
        + _QWEN_KV_WORDS
        + " Decode: 10 µs per sequence; 6.6 ns per attended "
        "token (256 KiB of KV read at ≈40 TB/s node bandwidth) — a dense GQA model is "
        "KV-bandwidth bound at large batch. Prefill: 2×32e9 FLOP/token at 40% of 8 × 2.5 "
        "PFLOP/s BF16 ≈ 125k tok/s; attention ≈4 × 5120 × 64 FLOP per token pair at that rate "
        "≈ 1.6e-10 s. Timing figures are estimates, to be replaced by measurements."
    ),
)

_CPU_TINY = Profile(
    name="cpu-tiny",
    model="cpu-tiny",
    description="A tiny, fast engine for tests: 4096 KV tokens, 8 sequences, 2048-token window",
    kv_capacity_tokens=4096,
    max_num_seqs=8,
    max_model_len=2048,
    max_num_batched_tokens=256,
    prefill_tps=100_000.0,
    prefill_per_ctx_token_s=0.0,
    per_agent_tps=1000.0,
    calibration_context_tokens=0,
    decode_per_seq_s=1e-4,
    decode_per_ctx_token_s=1e-7,
    sources=(
        "Invented round numbers, small enough that tests exercise KV exhaustion, preemption, "
        "admission limits and chunked prefill with a few short requests: 1000 tok/s for one "
        "sequence at zero context, +0.1 ms per extra sequence, +0.1 µs per attended token, "
        "100k prompt tokens/s, no quadratic prefill term."
    ),
)

#: Every built-in profile by name.
PROFILES: dict[str, Profile] = {
    p.name: p for p in (_DEEPSEEK_V41_FLASH, _DEEPSEEK_V4, _QWEN_CODER_32B, _CPU_TINY)
}


class UnknownProfileError(ConfigError, KeyError):
    """No profile has that name; the message lists the names there are.

    A :class:`~agentflow.ConfigError` (a bad setting), and a :class:`KeyError` too, as
    a failed registry lookup.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown profile"


def profile_names() -> list[str]:
    """The built-in profile names, sorted."""
    return sorted(PROFILES)


def get_profile(name: str) -> Profile:
    """The built-in profile called ``name``.

    Args:
        name: a registry name, e.g. ``"deepseek-v4.1-flash-gb300"`` or ``"cpu-tiny"``.

    Raises:
        UnknownProfileError: no such profile (a :class:`~agentflow.ConfigError` whose
            message lists them).
    """
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(profile_names())
        raise UnknownProfileError(f"unknown simulator profile {name!r}; known: {known}") from None
