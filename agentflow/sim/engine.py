"""The engine: continuous batching over a finite KV cache, one step at a time.

A discrete-event core the caller advances. :meth:`Engine.step` performs ONE engine
iteration — schedule, "run" the batch, sample — and returns how long it took on the
profile's timing model; the engine clock moves by that much. Nothing sleeps and
nothing is async, so a real-time driver sleeps for each step's duration (scaled, if it
likes) while a virtual-time driver just keeps stepping: the same engine, either way.

Scheduling follows vLLM v1's scheduler (FCFS policy, chunked prefill, prefix caching):

1. Running sequences first, oldest first. Each is scheduled for the tokens it has not
   computed — one for a decoding sequence, the rest of its prompt (capped by what is
   left of ``max_num_batched_tokens``) for one in prefill. If its new tokens need KV
   blocks and none are free, the NEWEST running sequence is preempted (recompute: its
   blocks are freed and it goes back to the front of the waiting queue, its output so
   far kept) until the allocation fits; a sequence that has to preempt itself waits.
2. Then, if nothing was preempted in this step, waiting requests in order, while fewer
   than ``max_num_seqs`` run and the token budget lasts: the longest cached prefix of
   full blocks is reused (at most ``tokens − 1``: the last token is always computed),
   the first chunk of the rest is scheduled if its blocks fit, and otherwise admission
   stops (head-of-line, as FCFS does).
3. A sequence that has computed all its tokens samples its next output token at the end
   of the step; it finishes at its plan's end, at ``max_tokens``, or at the window.

Timing: one step costs ``profile.step_s(...)`` of its decodes, their attended context,
and its prefill tokens — cached tokens are never computed, so they cost nothing.

For virtual time, :meth:`Engine.decode_run` takes a stretch of pure-decode steps in
one call with exactly the result of stepping through them.

This module holds the engine's state, clock and requests; the step loop (steps 1–3,
:meth:`Engine.decode_run`) is in :mod:`agentflow.sim.scheduler`.

:meth:`Engine.abort` is O(1) (a cancelled fleet aborts thousands of requests): it marks
the sequence ended and leaves it in place; the next step drops aborted running
sequences before scheduling, and the admission loop drops aborted waiting ones when
they reach the head of the queue (the queue is compacted once most of it is aborted).
Every count and id list leaves them out, and the outputs are the same as if they had
been removed at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow.sim.errors import RequestRejected, check_context_length
from agentflow.sim.kv import BlockManager
from agentflow.sim.plan import FinishReason
from agentflow.sim.profiles import Profile, get_profile
from agentflow.sim.records import EngineStats, RequestRecord
from agentflow.sim.scheduler import _Scheduler
from agentflow.sim.sequence import ENDED, RUNNING, EngineRequest, SeqState
from agentflow.sim.textgen import TextGenConfig, TextGenerator
from agentflow.sim.tokenizer import Tokenizer

__all__ = ["Engine", "EngineRequest", "RequestRejected"]


class Engine(_Scheduler):
    """A simulated serving engine on one profile; the caller owns the clock.

    Args:
        profile: a :class:`Profile` or a registry name.
        seed: fixes every output (with each request's prompt).
        textgen: how the model behaves (tool rounds, answer lengths); its longest answer
            at most the profile's ``max_model_len`` (:meth:`TextGenConfig.check_window`).
            The default (up to 256 tokens) is not checked: a small window cuts it, as any.
        enable_prefix_caching: reuse cached blocks across requests (on, as in vLLM v1).
        start_s: the engine clock's starting value.

    Example::

        engine = Engine("cpu-tiny", seed=1)
        rid = engine.add_chat([{"role": "user", "content": "hi"}], max_tokens=32)
        while engine.has_work:
            step = engine.step()          # sleep step.duration_s here in real time
            for r in step.emitted: ...    # engine.record(r).token_times_s[-1] == step.end_s

    Raises:
        ConfigError: ``textgen.answer_tokens`` allows answers longer than the window.
    """

    def __init__(
        self,
        profile: Profile | str,
        *,
        seed: int = 0,
        textgen: TextGenConfig | None = None,
        enable_prefix_caching: bool = True,
        start_s: float = 0.0,
    ) -> None:
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.seed = seed
        self.tokenizer = Tokenizer()
        self.textgen = TextGenerator(self.tokenizer, seed=seed, config=textgen)
        self.textgen.config.check_window(self.profile.max_model_len)
        self.kv = BlockManager(
            self.profile.num_blocks, self.profile.block_size, enable_caching=enable_prefix_caching
        )
        self._now = float(start_s)
        self._next_id = 0
        self._waiting: deque[SeqState] = deque()
        self._running: list[SeqState] = []
        # Aborted sequences still in _running / _waiting (dropped lazily, see abort()).
        self._dead_running = 0
        self._dead_waiting = 0
        self._active: dict[int, SeqState] = {}
        self._records: dict[int, RequestRecord] = {}
        self._steps = 0
        self._preemptions = 0
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._computed_prompt_tokens = 0
        self._finished = 0
        self._aborted = 0

    # --- Clock and state ---------------------------------------------------------------

    @property
    def now(self) -> float:
        """The engine clock, in seconds."""
        return self._now

    def advance_to(self, t: float) -> None:
        """Move the clock forward to ``t`` (idle time, or to catch up with a wall clock).

        Raises:
            ValueError: ``t`` is before :attr:`now`.
        """
        if t < self._now:
            raise ValueError(f"the engine clock cannot go back ({t} < {self._now})")
        self._now = float(t)

    @property
    def has_work(self) -> bool:
        """Whether a request is running or waiting (so :meth:`step` will do something)."""
        return len(self._running) > self._dead_running or len(self._waiting) > self._dead_waiting

    @property
    def num_running(self) -> int:
        """Sequences in the batch."""
        return len(self._running) - self._dead_running

    @property
    def num_waiting(self) -> int:
        """Requests in the waiting queue (preempted ones included)."""
        return len(self._waiting) - self._dead_waiting

    @property
    def running_ids(self) -> tuple[int, ...]:
        """Ids of the running sequences, oldest admission first."""
        return tuple([s.rid for s in self._running if s.state == RUNNING])

    @property
    def waiting_ids(self) -> tuple[int, ...]:
        """Ids of the waiting requests, next to be admitted first."""
        return tuple([s.rid for s in self._waiting if s.state != ENDED])

    def record(self, request_id: int) -> RequestRecord:
        """The live ground-truth record of a request.

        Raises:
            KeyError: no such request (or its record was popped).
        """
        return self._records[request_id]

    def pop_record(self, request_id: int) -> RequestRecord:
        """Forget a finished request's record and return it (long runs free memory so).

        Raises:
            KeyError: no such request.
            ValueError: it has not finished.
        """
        rec = self._records[request_id]
        if not rec.finished:
            raise ValueError(f"request {request_id} has not finished")
        return self._records.pop(request_id)

    def stats(self) -> EngineStats:
        """A snapshot of the gauges and counters."""
        kv = self.kv
        return EngineStats(
            now_s=self._now,
            steps=self._steps,
            num_running=self.num_running,
            num_waiting=self.num_waiting,
            kv_usage=kv.usage,
            prefix_cache_queries=kv.queries,
            prefix_cache_hits=kv.hits,
            preempted_prefix_cache_queries=kv.preempted_queries,
            preempted_prefix_cache_hits=kv.preempted_hits,
            num_preemptions=self._preemptions,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
            computed_prompt_tokens=self._computed_prompt_tokens,
            requests_finished=self._finished,
            requests_aborted=self._aborted,
            kv_evictions=kv.evictions,
        )

    # --- Requests ----------------------------------------------------------------------

    def add(self, request: EngineRequest, *, arrival_s: float | None = None) -> int:
        """Queue a request; returns its id.

        Args:
            request: prompt and output tokens, and the output limit.
            arrival_s: when it arrived on the engine clock (default :attr:`now`); may be
                earlier than :attr:`now` (it arrived while a step ran), never later.

        Raises:
            RequestRejected: it does not fit ``max_model_len`` (vLLM's 400 wording).
            ValueError: ``output_ids`` is empty, or ``arrival_s`` is in the future.
        """
        prompt_len = len(request.prompt_ids)
        max_tokens = check_context_length(
            prompt_len, request.max_tokens, self.profile.max_model_len
        )
        n_out = len(request.output_ids)
        if n_out == 0:
            raise ValueError("a request must plan at least one output token")
        arrival = self._now if arrival_s is None else float(arrival_s)
        if arrival > self._now:
            raise ValueError(f"arrival_s {arrival} is after the engine clock {self._now}")
        rid = self._next_id
        self._next_id += 1
        limit = min(max_tokens, n_out)
        reason: FinishReason = request.finish_reason if limit == n_out else "length"
        record = RequestRecord(
            request_id=rid,
            prompt_tokens=prompt_len,
            max_tokens=max_tokens,
            arrival_s=arrival,
            plan=request.plan,
        )
        tokens = [*request.prompt_ids, *request.output_ids[:limit]]
        seq = SeqState(rid, tokens, prompt_len, limit, reason, record)
        self._records[rid] = record
        self._active[rid] = seq
        self._waiting.append(seq)
        return rid

    def add_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        parallel_tool_calls: bool = True,
        max_tokens: int | None = None,
        stop: str | Sequence[str] | None = None,
        salt: str = "",
        arrival_s: float | None = None,
        tool_rounds: int | None = None,
        session_id: str | None = None,
    ) -> int:
        """Render, plan and queue an OpenAI chat request; returns its id.

        The plan is on ``record(id).plan``; its :meth:`~OutputPlan.delta` turns the
        tokens each step emits into streaming deltas.

        Args:
            messages: the request's ``messages``.
            tools: the request's ``tools``.
            tool_choice: the request's ``tool_choice``.
            parallel_tool_calls: the request's ``parallel_tool_calls``.
            max_tokens: ``max_completion_tokens`` or ``max_tokens``; ``None`` for the window.
            stop: the request's ``stop``.
            salt: varies the output of otherwise identical requests (e.g. its ``seed``).
            arrival_s: as for :meth:`add`.
            tool_rounds: this conversation's tool rounds, overriding the configured number.
            session_id: the conversation's id (``X-Session-ID``): tool rounds are counted
                across its requests (see :mod:`agentflow.sim.sessions`).

        Raises:
            RequestRejected: it does not fit ``max_model_len`` (vLLM's 400 wording).
        """
        prompt_ids = self.tokenizer.render_chat(messages, tools)
        limit = check_context_length(len(prompt_ids), max_tokens, self.profile.max_model_len)
        plan = self.textgen.plan(
            messages,
            prompt_ids,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            stop=stop,
            salt=salt,
            tool_rounds=tool_rounds,
            session_id=session_id,
            max_tokens=limit,
        )
        return self.add(
            EngineRequest.from_plan(prompt_ids, plan, max_tokens=max_tokens), arrival_s=arrival_s
        )

    def abort(self, request_id: int) -> bool:
        """Cancel a waiting or running request (client gone); its blocks are freed.

        O(1) (plus freeing its blocks): the sequence is marked ended and dropped from
        the batch or the queue later (see the module docstring).

        Returns:
            whether it was still in the engine.
        """
        seq = self._active.pop(request_id, None)
        if seq is None:
            return False
        if seq.state == RUNNING:
            self.kv.free(seq.blocks)
            self._dead_running += 1
        else:
            self._dead_waiting += 1
        seq.state = ENDED
        waiting = self._waiting
        if self._dead_waiting > 32 and 2 * self._dead_waiting > len(waiting):
            # Mostly aborted: compact (amortised O(1) per abort), keeping the order.
            self._waiting = deque([s for s in waiting if s.state != ENDED])
            self._dead_waiting = 0
        seq.record.finish_reason = "abort"
        seq.record.finished_s = self._now
        self._aborted += 1
        return True
