"""``GET /metrics``: the engine's state in Prometheus text format, with vLLM's names.

No client library: the exposition is a few lines written on each scrape from
:meth:`Engine.stats <agentflow.sim.engine.Engine.stats>`, the driver's counters and
histograms fed from each finished request's ground truth. Names and types follow what
vLLM (v1) exports through ``prometheus_client`` — a counter ``vllm:x`` is declared as
``# TYPE vllm:x counter`` and sampled as ``vllm:x_total`` — every series labelled with
``model_name``:

============================================== =========== ===================================
``vllm:num_requests_running``                  gauge       sequences in the batch
``vllm:num_requests_waiting``                  gauge       requests queued (preempted included)
``vllm:kv_cache_usage_perc``                   gauge       fraction of KV blocks held (0–1)
``vllm:prefix_cache_queries``                  counter     prompt tokens looked up in the cache
``vllm:prefix_cache_hits``                     counter     of those, tokens found cached
``vllm:num_preemptions``                       counter     preemptions
``vllm:prompt_tokens``                         counter     prompt tokens of admitted requests
``vllm:generation_tokens``                     counter     output tokens produced
``vllm:request_success``                       counter     finished requests, by ``finished_reason``
                                                           (a tool call's: ``stop``, as vLLM)
``vllm:time_to_first_token_seconds``           histogram   arrival → first token
``vllm:inter_token_latency_seconds``           histogram   each gap between output tokens
``vllm:request_time_per_output_token_seconds`` histogram   per request: (last − first) / (n − 1)
``vllm:time_per_output_token_seconds``         histogram   each gap (vLLM's deprecated ITL name)
``vllm:e2e_request_latency_seconds``           histogram   arrival → finish
``vllm:request_queue_time_seconds``            histogram   arrival → first admission
``vllm:request_prefill_time_seconds``          histogram   prefill start → first token
============================================== =========== ===================================

Times are engine seconds (the modelled rack's); multiply by ``agentflow_sim:time_scale``
(also in every response's ``x-agentflow-time-scale`` header) for wall seconds. The
simulator's own series are under ``agentflow_sim:``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from agentflow.sim.driver import DriverStats
from agentflow.sim.records import EngineStats, RequestRecord

__all__ = ["CONTENT_TYPE", "Histogram", "SimMetrics"]

#: The content type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM's buckets, with finer ones below 10 ms: simulated steps are often ~1 ms.
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_ITL_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    """A cumulative Prometheus histogram (buckets, sum, count)."""

    __slots__ = ("_counts", "bounds", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def observe_many(self, values: Sequence[float]) -> None:
        """Add several observations."""
        counts = self._counts
        bounds = self.bounds
        left = bisect.bisect_left
        for v in values:
            counts[left(bounds, v)] += 1
        self.count += len(values)
        self.sum += sum(values)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, cumulative count)`` for every bucket, ``+Inf`` last."""
        out = []
        acc = 0
        for b, c in zip(self.bounds, self._counts, strict=False):
            acc += c
            out.append((_num(b), acc))
        out.append(("+Inf", self.count))
        return out


def _num(x: float) -> str:
    return repr(float(x))


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class SimMetrics:
    """Histograms fed by finished requests, and the text exposition.

    Args:
        model_name: the ``model_name`` label.
    """

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._labels = f'model_name="{_esc(model_name)}"'
        self.ttft = Histogram(_TTFT_BUCKETS)
        self.itl = Histogram(_ITL_BUCKETS)
        self.tpot = Histogram(_ITL_BUCKETS)
        self.e2e = Histogram(_LATENCY_BUCKETS)
        self.queue = Histogram(_LATENCY_BUCKETS)
        self.prefill = Histogram(_LATENCY_BUCKETS)
        # vLLM's finish reasons (its engine's FinishReason): a tool-call answer ends on a
        # stop token and counts as "stop"; only the chat response says "tool_calls".
        self.success: dict[str, int] = {"stop": 0, "length": 0}
        self.http_requests: dict[tuple[str, int], int] = {}
        self.faults: dict[str, int] = {}

    def observe(self, record: RequestRecord) -> None:
        """Take one finished request's ground truth (a driver finish hook)."""
        if record.ttft_s is not None:
            self.ttft.observe(record.ttft_s)
        times = record.token_times_s
        if len(times) >= 2:
            self.itl.observe_many([b - a for a, b in itertools.pairwise(times)])
            self.tpot.observe((times[-1] - times[0]) / (len(times) - 1))
        if record.e2e_s is not None:
            self.e2e.observe(record.e2e_s)
        if record.queue_s is not None:
            self.queue.observe(record.queue_s)
        if record.prefill_s is not None:
            self.prefill.observe(record.prefill_s)
        reason = record.finish_reason or "stop"
        if reason == "tool_calls":
            reason = "stop"
        self.success[reason] = self.success.get(reason, 0) + 1

    def render(self, stats: EngineStats, driver: DriverStats) -> str:
        """The whole ``/metrics`` text."""
        lab = self._labels
        lines: list[str] = []

        def gauge(name: str, value: float, help_: str) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name}{{{lab}}} {_num(value)}")

        def counter(name: str, value: float, help_: str) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} counter")
            lines.append(f"{name}_total{{{lab}}} {_num(value)}")

        def histogram(name: str, h: Histogram, help_: str) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} histogram")
            for le, c in h.cumulative():
                lines.append(f'{name}_bucket{{{lab},le="{le}"}} {_num(c)}')
            lines.append(f"{name}_count{{{lab}}} {_num(h.count)}")
            lines.append(f"{name}_sum{{{lab}}} {_num(h.sum)}")

        gauge(
            "vllm:num_requests_running",
            stats.num_running,
            "Number of requests in model execution batches.",
        )
        gauge(
            "vllm:num_requests_waiting",
            stats.num_waiting,
            "Number of requests waiting to be processed.",
        )
        gauge(
            "vllm:kv_cache_usage_perc", stats.kv_usage, "KV-cache usage. 1 means 100 percent usage."
        )
        counter(
            "vllm:prefix_cache_queries",
            stats.prefix_cache_queries,
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        counter(
            "vllm:prefix_cache_hits",
            stats.prefix_cache_hits,
            "Prefix cache hits, in terms of number of cached tokens.",
        )
        counter(
            "vllm:num_preemptions",
            stats.num_preemptions,
            "Cumulative number of preemptions from the engine.",
        )
        counter("vllm:prompt_tokens", stats.prompt_tokens, "Number of prefill tokens processed.")
        counter(
            "vllm:generation_tokens",
            stats.generation_tokens,
            "Number of generation tokens processed.",
        )
        lines.append("# HELP vllm:request_success Count of successfully processed requests.")
        lines.append("# TYPE vllm:request_success counter")
        for reason, n in sorted(self.success.items()):
            lines.append(
                f'vllm:request_success_total{{{lab},finished_reason="{_esc(reason)}"}} {_num(n)}'
            )
        histogram(
            "vllm:time_to_first_token_seconds",
            self.ttft,
            "Histogram of time to first token in seconds.",
        )
        histogram(
            "vllm:inter_token_latency_seconds",
            self.itl,
            "Histogram of inter-token latency in seconds.",
        )
        histogram(
            "vllm:request_time_per_output_token_seconds",
            self.tpot,
            "Histogram of time_per_output_token_seconds per request.",
        )
        histogram(
            "vllm:time_per_output_token_seconds",
            self.itl,
            "Histogram of time per output token in seconds."
            "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        )
        histogram(
            "vllm:e2e_request_latency_seconds",
            self.e2e,
            "Histogram of e2e request latency in seconds.",
        )
        histogram(
            "vllm:request_queue_time_seconds",
            self.queue,
            "Histogram of time spent in WAITING phase for request.",
        )
        histogram(
            "vllm:request_prefill_time_seconds",
            self.prefill,
            "Histogram of time spent in PREFILL phase for request.",
        )
        gauge(
            "agentflow_sim:time_scale",
            driver.time_scale,
            "Wall seconds per engine second (every time above is engine seconds).",
        )
        gauge("agentflow_sim:engine_time_seconds", stats.now_s, "The engine clock.")
        counter("agentflow_sim:steps", stats.steps, "Engine steps taken.")
        counter(
            "agentflow_sim:late_steps",
            driver.late_steps,
            "Steps delivered after their modelled end (the process could not keep up).",
        )
        counter(
            "agentflow_sim:lag_seconds",
            driver.lag_s,
            "Wall seconds the engine clock was moved forward to catch up with a late loop.",
        )
        counter(
            "agentflow_sim:prompt_tokens_computed",
            stats.computed_prompt_tokens,
            "Prompt tokens actually computed (cache hits excluded, recompute included).",
        )
        counter(
            "agentflow_sim:requests_aborted",
            stats.requests_aborted,
            "Requests aborted (client gone).",
        )
        counter("agentflow_sim:kv_evictions", stats.kv_evictions, "Cached KV blocks evicted.")
        lines.append("# HELP agentflow_sim:faults_injected Faults injected, by kind.")
        lines.append("# TYPE agentflow_sim:faults_injected counter")
        for kind, n in sorted(self.faults.items()):
            lines.append(
                f'agentflow_sim:faults_injected_total{{{lab},kind="{_esc(kind)}"}} {_num(n)}'
            )
        return "\n".join(lines) + "\n"
