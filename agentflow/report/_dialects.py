"""How vLLM, SGLang and llama.cpp's server name the figures a cross-check reads.

Checked against: vLLM v1's ``vllm/v1/metrics/loggers.py`` names (and the older
``vllm:gpu_cache_usage_perc`` / ``vllm:gpu_prefix_cache_*``), SGLang's
``sglang/srt/metrics/collector.py``, and the ``/metrics`` page of the llama.cpp server
agentflow runs (``agentflow.llamacpp``, xllamacpp): its ``prompt_tokens`` leave out the
tokens reused from the cache, which it counts apart (``prompt_tokens_cached``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentflow.report._prom import MetricsSnapshot

__all__ = ["DIALECTS", "MEAN_GAUGES", "Dialect"]

_Alts = tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one server names its metrics.

    Each canonical key maps to alternatives, tried in order; an alternative is a tuple of
    names whose values are added (llama.cpp counts cached prompt tokens apart).

    Attributes:
        name: ``vllm``, ``sglang``, ``llamacpp``.
        prefix: the names' prefix.
        counters, histograms, gauges: canonical key → alternatives.
    """

    name: str
    prefix: str
    counters: Mapping[str, _Alts] = field(default_factory=dict)
    histograms: Mapping[str, _Alts] = field(default_factory=dict)
    gauges: Mapping[str, _Alts] = field(default_factory=dict)

    def resolve(self, snap: MetricsSnapshot) -> dict[str, tuple[str, ...]]:
        """Canonical key → the names ``snap`` has for it (counters, gauges, histograms)."""
        out: dict[str, tuple[str, ...]] = {}
        for table in (self.counters, self.gauges, self.histograms):
            for key, alts in table.items():
                for names in alts:
                    if all(snap.has(n) for n in names):
                        out[key] = names
                        break
        return out


def _one(*names: str) -> _Alts:
    return tuple((n,) for n in names)


#: The dialects known, by name.
DIALECTS: dict[str, Dialect] = {
    "vllm": Dialect(
        "vllm",
        "vllm:",
        counters={
            "prompt_tokens": _one("vllm:prompt_tokens"),
            "generation_tokens": _one("vllm:generation_tokens"),
            "cache_queries": _one("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
            "cache_hits": _one("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
            "requests": _one("vllm:request_success"),
            "preemptions": _one("vllm:num_preemptions"),
        },
        histograms={
            "ttft_s": _one("vllm:time_to_first_token_seconds"),
            "itl_s": _one("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
            # Per request only: vllm:time_per_output_token_seconds is per token (an ITL;
            # vLLM v1 deprecated it for vllm:inter_token_latency_seconds).
            "tpot_s": _one("vllm:request_time_per_output_token_seconds"),
            "e2e_s": _one("vllm:e2e_request_latency_seconds"),
            "queue_s": _one("vllm:request_queue_time_seconds"),
            "prefill_s": _one("vllm:request_prefill_time_seconds"),
            "decode_s": _one("vllm:request_decode_time_seconds"),
        },
        gauges={
            "kv_cache_usage": _one("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            "running": _one("vllm:num_requests_running"),
            "waiting": _one("vllm:num_requests_waiting"),
        },
    ),
    "sglang": Dialect(
        "sglang",
        "sglang:",
        counters={
            "prompt_tokens": _one("sglang:prompt_tokens"),
            "generation_tokens": _one("sglang:generation_tokens"),
            "cache_queries": _one("sglang:prompt_tokens"),
            "cache_hits": _one("sglang:cached_tokens"),
            "requests": _one("sglang:num_requests"),
        },
        histograms={
            "ttft_s": _one("sglang:time_to_first_token_seconds"),
            "itl_s": _one(
                "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"
            ),
            "tpot_s": _one("sglang:time_per_output_token_seconds"),
            "e2e_s": _one("sglang:e2e_request_latency_seconds"),
            "queue_s": _one("sglang:queue_time_seconds"),
        },
        gauges={
            "kv_cache_usage": _one("sglang:token_usage"),
            "running": _one("sglang:num_running_reqs"),
            "waiting": _one("sglang:num_queue_reqs"),
        },
    ),
    "llamacpp": Dialect(
        "llamacpp",
        "llamacpp:",
        counters={
            # llama.cpp's prompt_tokens leaves out the tokens reused from its cache.
            "prompt_tokens": (
                ("llamacpp:prompt_tokens", "llamacpp:prompt_tokens_cached"),
                ("llamacpp:prompt_tokens",),
            ),
            "cache_queries": (("llamacpp:prompt_tokens", "llamacpp:prompt_tokens_cached"),),
            "cache_hits": _one("llamacpp:prompt_tokens_cached"),
            "generation_tokens": _one("llamacpp:tokens_predicted"),
            "prompt_seconds": _one("llamacpp:prompt_seconds"),
            "generation_seconds": _one("llamacpp:tokens_predicted_seconds"),
        },
        gauges={
            "kv_cache_usage": _one("llamacpp:kv_cache_usage_ratio"),
            "running": _one("llamacpp:requests_processing"),
            "waiting": _one("llamacpp:requests_deferred"),
        },
    ),
}

#: Gauges averaged (not summed) over label sets: fractions.
MEAN_GAUGES = frozenset({"kv_cache_usage"})
