"""Ground truth: what happened to each request, and to the engine, on the engine clock.

All times are seconds on the engine clock: the sum of the durations of the steps
taken (plus any idle time the caller advanced it by). A token's time is the end of
the step that produced it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentflow.sim.plan import FinishReason, OutputPlan

__all__ = [
    "DecodeRun",
    "DriverStats",
    "EngineStats",
    "RecordArchive",
    "RequestRecord",
    "StepResult",
]


@dataclass(slots=True, kw_only=True)
class RequestRecord:
    """One request's life in the engine; updated in place while it runs.

    Attributes:
        request_id: the id :meth:`Engine.add <agentflow.sim.engine.Engine.add>` returned.
        prompt_tokens: tokens of the prompt.
        max_tokens: the effective output limit (the request's, or what the window leaves).
        arrival_s: when it was added.
        admitted_s: when it was first admitted to the running batch (``None`` while waiting).
        prefill_start_s: start of the first step that computed any of its prompt.
        prefill_end_s: end of the step that produced its first token.
        token_times_s: when each output token came out, in order.
        cached_tokens: prompt tokens served from the prefix cache at first admission
            (what ``usage.prompt_tokens_details.cached_tokens`` reports); ``None`` until then.
        num_preemptions: times it was preempted (its KV freed, to be recomputed).
        preempted_at_s: when each preemption happened.
        recomputed_tokens: tokens computed after its first preemption (cache hits
            excluded): the cost of recompute.
        finish_reason: ``"stop"``, ``"tool_calls"``, ``"length"`` or ``"abort"``;
            ``None`` while it runs.
        finished_s: when it finished or was aborted.
        plan: the output plan, when the request came with one.
    """

    request_id: int
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    admitted_s: float | None = None
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    cached_tokens: int | None = None
    num_preemptions: int = 0
    preempted_at_s: list[float] = field(default_factory=list)
    recomputed_tokens: int = 0
    finish_reason: FinishReason | None = None
    finished_s: float | None = None
    plan: OutputPlan | None = field(default=None, repr=False)

    @property
    def completion_tokens(self) -> int:
        """Output tokens produced so far."""
        return len(self.token_times_s)

    @property
    def finished(self) -> bool:
        """Whether it has finished (or been aborted)."""
        return self.finish_reason is not None

    @property
    def queue_s(self) -> float | None:
        """Arrival → first admission."""
        return None if self.admitted_s is None else self.admitted_s - self.arrival_s

    @property
    def prefill_s(self) -> float | None:
        """Start of prefill → first token (every step in between, chunks and all)."""
        if self.prefill_start_s is None or self.prefill_end_s is None:
            return None
        return self.prefill_end_s - self.prefill_start_s

    @property
    def ttft_s(self) -> float | None:
        """Arrival → first token."""
        return self.token_times_s[0] - self.arrival_s if self.token_times_s else None

    @property
    def tpot_s(self) -> float | None:
        """(last token − first token) / (tokens − 1); ``None`` below two tokens."""
        n = len(self.token_times_s)
        if n < 2:
            return None
        return (self.token_times_s[-1] - self.token_times_s[0]) / (n - 1)

    @property
    def e2e_s(self) -> float | None:
        """Arrival → finish."""
        return None if self.finished_s is None else self.finished_s - self.arrival_s

    def itl_s(self) -> list[float]:
        """Every gap between successive output tokens."""
        t = self.token_times_s
        return [b - a for a, b in itertools.pairwise(t)]

    def timings(self) -> dict[str, Any]:
        """A llama.cpp-style ``timings`` object for the final chunk.

        ``prompt_n`` counts prompt tokens computed (cached ones excluded), ``prompt_ms``
        is :attr:`prefill_s`; ``predicted_ms`` runs from the first token to the last, so
        ``predicted_per_token_ms`` is :attr:`tpot_s` in ms. ``queue_ms`` and
        ``preemptions`` are the simulator's own additions.
        """
        cached = self.cached_tokens or 0
        prompt_n = self.prompt_tokens - cached
        prompt_ms = (self.prefill_s or 0.0) * 1000.0
        n = self.completion_tokens
        t = self.token_times_s
        predicted_ms = (t[-1] - t[0]) * 1000.0 if n >= 2 else 0.0
        per_token_ms = predicted_ms / (n - 1) if n >= 2 else 0.0
        return {
            "cache_n": cached,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": prompt_n * 1000.0 / prompt_ms if prompt_ms else 0.0,
            "predicted_n": n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": per_token_ms,
            "predicted_per_second": 1000.0 / per_token_ms if per_token_ms else 0.0,
            "queue_ms": (self.queue_s or 0.0) * 1000.0,
            "preemptions": self.num_preemptions,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """One engine iteration.

    Attributes:
        start_s: the engine clock when the step began.
        duration_s: how long it took on the profile's timing model (0 for an idle step);
            the engine clock has advanced by this much.
        emitted: ids of the requests that produced one output token in this step (the
            newest of their :attr:`RequestRecord.token_times_s`), in batch order.
        finished: ids of the requests that finished in this step.
        admitted: ids admitted from the waiting queue in this step.
        preempted: ids preempted in this step (back at the front of the waiting queue).
        num_prefill_tokens: prompt tokens computed in the step.
        num_decode_seqs: sequences that decoded one token in the step.
    """

    start_s: float
    duration_s: float
    emitted: tuple[int, ...] = ()
    finished: tuple[int, ...] = ()
    admitted: tuple[int, ...] = ()
    preempted: tuple[int, ...] = ()
    num_prefill_tokens: int = 0
    num_decode_seqs: int = 0

    @property
    def end_s(self) -> float:
        """The engine clock when the step ended (every token of the step carries it)."""
        return self.start_s + self.duration_s

    @property
    def idle(self) -> bool:
        """Whether there was nothing to do."""
        return self.duration_s == 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeRun:
    """Several pure-decode steps taken at once (see ``Engine.decode_run``).

    Attributes:
        start_s: the engine clock before the first step.
        step_ends_s: the end of each step; every request in ``request_ids`` emitted one
            token at each of these times.
        request_ids: the requests that decoded, in batch order.
        finished: those that finished at the last step.
    """

    start_s: float
    step_ends_s: tuple[float, ...]
    request_ids: tuple[int, ...]
    finished: tuple[int, ...] = ()

    @property
    def steps(self) -> int:
        """Steps taken."""
        return len(self.step_ends_s)

    @property
    def end_s(self) -> float:
        """The engine clock after the last step."""
        return self.step_ends_s[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStats:
    """A snapshot of the engine's gauges and counters (vLLM's ``/metrics`` names in brackets).

    Attributes:
        now_s: the engine clock.
        steps: steps taken (idle ones excluded).
        num_running: sequences in the batch [``vllm:num_requests_running``].
        num_waiting: requests queued [``vllm:num_requests_waiting``].
        kv_usage: fraction of KV blocks held, 0–1 [``vllm:kv_cache_usage_perc``].
        prefix_cache_queries: prompt tokens looked up [``vllm:prefix_cache_queries``].
        prefix_cache_hits: of those, tokens found cached [``vllm:prefix_cache_hits``].
        preempted_prefix_cache_queries: lookups of re-admitted preempted requests.
        preempted_prefix_cache_hits: hits of re-admitted preempted requests.
        num_preemptions: preemptions [``vllm:num_preemptions``].
        prompt_tokens: prompt tokens of admitted requests [``vllm:prompt_tokens``].
        generation_tokens: output tokens produced [``vllm:generation_tokens``].
        computed_prompt_tokens: prompt (and recompute) tokens actually computed.
        requests_finished: requests that finished (aborts excluded).
        requests_aborted: requests aborted.
        kv_evictions: cached blocks evicted.
    """

    now_s: float
    steps: int
    num_running: int
    num_waiting: int
    kv_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    preempted_prefix_cache_queries: int
    preempted_prefix_cache_hits: int
    num_preemptions: int
    prompt_tokens: int
    generation_tokens: int
    computed_prompt_tokens: int
    requests_finished: int
    requests_aborted: int
    kv_evictions: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverStats:
    """The driver's own counters (the engine's are in :meth:`Engine.stats`).

    Attributes:
        time_scale: loop seconds per engine second.
        steps: engine steps taken (idle ones excluded).
        late_steps: steps whose end time had already passed when the step was computed
            (the loop could not keep up with the modelled speed).
        resyncs: times the engine clock was moved forward to a loop that had fallen more
            than ``resync_s`` behind.
        lag_s: loop seconds skipped by those moves, in total (0 when the sim kept up).
        max_late_s: the latest any step's delivery came, in loop seconds.
        flushes: times the flush hooks ran (after every step on schedule, once per batch
            of back-to-back steps when late): ``steps / flushes`` steps per write.
        submitted: requests accepted.
        active: requests not yet finished or cancelled.
        cancelled: requests cancelled by their consumer (client gone) before finishing.
    """

    time_scale: float
    steps: int
    late_steps: int
    resyncs: int
    lag_s: float
    max_late_s: float
    flushes: int
    submitted: int
    active: int
    cancelled: int


class RecordArchive:
    """The records of the last ``keep`` finished requests, without their output plans
    (the output text, ~50 bytes a token): the timings stay retrievable, oldest forgotten
    first."""

    __slots__ = ("_records", "keep")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._records: OrderedDict[int, RequestRecord] = OrderedDict()

    def add(self, record: RequestRecord) -> None:
        """Keep ``record`` (without its plan), forgetting the oldest beyond ``keep``."""
        if not self.keep:
            return
        records = self._records
        records[record.request_id] = dataclasses.replace(record, plan=None)
        if len(records) > self.keep:
            records.popitem(last=False)

    def get(self, request_id: int) -> RequestRecord | None:
        """The kept record of a request, or ``None``."""
        return self._records.get(request_id)
