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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow.sim.errors import RequestRejected, check_context_length
from agentflow.sim.kv import BlockManager, extend_block_hashes
from agentflow.sim.profiles import Profile, get_profile
from agentflow.sim.records import DecodeRun, EngineStats, RequestRecord, StepResult
from agentflow.sim.sequence import EngineRequest, SeqState
from agentflow.sim.textgen import FinishReason, TextGenConfig, TextGenerator
from agentflow.sim.tokenizer import Tokenizer

__all__ = ["Engine", "EngineRequest", "RequestRejected"]


class Engine:
    """A simulated serving engine on one profile; the caller owns the clock.

    Args:
        profile: a :class:`Profile` or a registry name.
        seed: fixes every output (with each request's prompt).
        textgen: how the model behaves (tool rounds, answer lengths).
        enable_prefix_caching: reuse cached blocks across requests (on, as in vLLM v1).
        start_s: the engine clock's starting value.

    Example::

        engine = Engine("cpu-tiny", seed=1)
        rid = engine.add_chat([{"role": "user", "content": "hi"}], max_tokens=32)
        while engine.has_work:
            step = engine.step()          # sleep step.duration_s here in real time
            for r in step.emitted: ...    # engine.record(r).token_times_s[-1] == step.end_s
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
        self.kv = BlockManager(
            self.profile.num_blocks, self.profile.block_size, enable_caching=enable_prefix_caching
        )
        self._now = float(start_s)
        self._next_id = 0
        self._waiting: deque[SeqState] = deque()
        self._running: list[SeqState] = []
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
        return bool(self._running or self._waiting)

    @property
    def num_running(self) -> int:
        """Sequences in the batch."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Requests in the waiting queue (preempted ones included)."""
        return len(self._waiting)

    @property
    def running_ids(self) -> tuple[int, ...]:
        """Ids of the running sequences, oldest admission first."""
        return tuple([s.rid for s in self._running])

    @property
    def waiting_ids(self) -> tuple[int, ...]:
        """Ids of the waiting requests, next to be admitted first."""
        return tuple([s.rid for s in self._waiting])

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
            num_running=len(self._running),
            num_waiting=len(self._waiting),
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
        check_context_length(len(prompt_ids), max_tokens, self.profile.max_model_len)
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
        )
        return self.add(
            EngineRequest.from_plan(prompt_ids, plan, max_tokens=max_tokens), arrival_s=arrival_s
        )

    def abort(self, request_id: int) -> bool:
        """Cancel a waiting or running request (client gone); its blocks are freed.

        Returns:
            whether it was still in the engine.
        """
        seq = self._active.pop(request_id, None)
        if seq is None:
            return False
        if seq in self._running:
            self._running.remove(seq)
            self.kv.free(seq.blocks)
        else:
            self._waiting.remove(seq)
        seq.record.finish_reason = "abort"
        seq.record.finished_s = self._now
        self._aborted += 1
        return True

    # --- The step ----------------------------------------------------------------------

    def step(self) -> StepResult:
        """Run one engine iteration and advance the clock by its duration."""
        start = self._now
        running = self._running
        waiting = self._waiting
        if not running and not waiting:
            return StepResult(start_s=start, duration_s=0.0)
        kv = self.kv
        caching = kv.enable_caching
        bs = self.profile.block_size
        budget = self.profile.max_num_batched_tokens
        preempted: list[int] = []
        samplers: list[SeqState] = []
        dec_n = 0
        dec_ctx = 0
        pf_tokens = 0
        pf_pairs = 0

        # 1. Running sequences, oldest first; preempt the newest when KV runs out.
        # Scheduling a sequence's tokens also counts their cost and caches the blocks
        # they fill (vLLM v1 caches full blocks when it allocates them, too).
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            c = seq.num_computed
            n = seq.num_tokens - c
            if n > budget:
                n = budget
            new_c = c + n
            need = (new_c + bs - 1) // bs - len(seq.blocks)
            if need > 0 and not kv.allocate(seq.blocks, need):
                while True:
                    victim = running.pop()
                    self._preempt(victim, start)
                    preempted.append(victim.rid)
                    if victim is seq or kv.allocate(seq.blocks, need):
                        break
                if victim is seq:
                    break
            budget -= n
            i += 1
            seq.num_computed = new_c
            if n == 1 and seq.num_output:
                dec_n += 1
                dec_ctx += new_c
            else:
                pf_tokens += n
                pf_pairs += n * c + n * (n + 1) // 2
                if seq.record.num_preemptions:
                    seq.record.recomputed_tokens += n
            if caching and new_c // bs > seq.registered:
                self._register(seq, new_c // bs)
            if new_c == seq.num_tokens:
                samplers.append(seq)

        # 2. Admit waiting requests (not in a step that preempted).
        admitted: list[int] = []
        if not preempted:
            max_seqs = self.profile.max_num_seqs
            while waiting and len(running) < max_seqs and budget > 0:
                seq = waiting[0]
                num_tokens = seq.num_tokens
                hit = 0
                if caching:
                    limit_blocks = (num_tokens - 1) // bs
                    if len(seq.hashes) < limit_blocks:
                        extend_block_hashes(seq.hashes, seq.tokens, bs, limit_blocks)
                    hit = kv.match(seq.hashes, limit_blocks)
                c = hit * bs
                n = num_tokens - c
                if n > budget:
                    n = budget
                new_c = c + n
                need = (new_c + bs - 1) // bs - hit
                free = kv.free_blocks
                if need + hit > free and need + kv.evictable_among(seq.hashes, hit) > free:
                    break
                waiting.popleft()
                kv.acquire(seq.blocks, seq.hashes, hit)
                kv.allocate(seq.blocks, need)
                rec = seq.record
                kv.record_query(num_tokens, c, preempted=rec.num_preemptions > 0)
                if rec.admitted_s is None:
                    rec.admitted_s = start
                    rec.prefill_start_s = start
                    rec.cached_tokens = c
                    self._prompt_tokens += seq.prompt_len
                else:
                    rec.recomputed_tokens += n
                running.append(seq)
                admitted.append(seq.rid)
                budget -= n
                seq.num_computed = new_c
                seq.registered = hit
                pf_tokens += n
                pf_pairs += n * c + n * (n + 1) // 2
                if caching and new_c // bs > hit:
                    self._register(seq, new_c // bs)
                if new_c == num_tokens:
                    samplers.append(seq)

        # 3. The step's duration; then every caught-up sequence emits one token.
        duration = self.profile.step_s(dec_n, dec_ctx, pf_tokens, pf_pairs)
        end = start + duration
        self._now = end
        self._steps += 1
        self._computed_prompt_tokens += pf_tokens
        finished: list[int] = []
        for seq in samplers:
            times = seq.record.token_times_s
            if not times:
                seq.record.prefill_end_s = end
            times.append(end)
            seq.num_tokens += 1
            seq.num_output += 1
            if seq.num_output >= seq.limit:
                finished.append(seq.rid)
                self._finish(seq, end)
        self._generation_tokens += len(samplers)
        if finished:
            self._running = [s for s in running if s.record.finish_reason is None]
        return StepResult(
            start_s=start,
            duration_s=duration,
            emitted=tuple([s.rid for s in samplers]),
            finished=tuple(finished),
            admitted=tuple(admitted),
            preempted=tuple(preempted),
            num_prefill_tokens=pf_tokens,
            num_decode_seqs=dec_n,
        )

    def decode_run(self, max_steps: int, *, until_s: float | None = None) -> DecodeRun | None:
        """Take up to ``max_steps`` steps at once while they can only be pure decode.

        For virtual time: the result is exactly what as many :meth:`step` calls would
        have done (the same records, times, cache and counters), but the Python work is
        per sequence per run instead of per sequence per step. It applies when every
        running sequence is decoding, no waiting request could be admitted (none waits,
        or ``max_num_seqs`` are running), the blocks the run needs are free (so no
        preemption) and no block it fills is already cached; then it stops at the
        first finish, after ``max_steps``, or at the first step that ends at or after
        ``until_s`` (as ``while engine.now < until_s: engine.step()`` would).

        Returns:
            what happened, or ``None`` (nothing done) when a plain :meth:`step` is needed.
        """
        running = self._running
        profile = self.profile
        n = len(running)
        if max_steps < 1 or n == 0 or n > profile.max_num_batched_tokens:
            return None
        if self._waiting and n < profile.max_num_seqs:
            return None
        if until_s is not None and self._now >= until_s:
            return None
        k = max_steps
        ctx0 = 0
        for seq in running:
            if seq.num_tokens - seq.num_computed != 1 or not seq.num_output:
                return None
            left = seq.limit - seq.num_output
            if left < k:
                k = left
            ctx0 += seq.num_tokens
        t = self._now
        ends: list[float] = []
        step_s = profile.step_s
        for j in range(k):
            t = t + step_s(n, ctx0 + j * n, 0, 0)
            ends.append(t)
            if until_s is not None and t >= until_s:
                break
        k = len(ends)
        kv = self.kv
        bs = profile.block_size
        needs = [(seq.num_computed + k + bs - 1) // bs - len(seq.blocks) for seq in running]
        if sum(needs) > kv.free_blocks:
            return None
        if kv.enable_caching:
            new_keys: list[int] = []
            for seq in running:
                full = (seq.num_computed + k) // bs
                if full > seq.registered:
                    if len(seq.hashes) < full:
                        extend_block_hashes(seq.hashes, seq.tokens, bs, full)
                    new_keys.extend(seq.hashes[seq.registered : full])
            # A key already cached (or twice in the run) would be registered in a
            # different order than step by step: let step() handle those blocks.
            if new_keys and (len(set(new_keys)) != len(new_keys) or kv.any_cached(new_keys)):
                return None
        start = self._now
        finished: list[int] = []
        for seq, need in zip(running, needs, strict=True):
            if need > 0:
                kv.allocate(seq.blocks, need)
            seq.num_computed += k
            if kv.enable_caching and seq.num_computed // bs > seq.registered:
                self._register(seq, seq.num_computed // bs)
            seq.record.token_times_s.extend(ends)
            seq.num_tokens += k
            seq.num_output += k
        for seq in running:
            if seq.num_output >= seq.limit:
                finished.append(seq.rid)
                self._finish(seq, t)
        ids = tuple([s.rid for s in running])
        if finished:
            self._running = [s for s in running if s.record.finish_reason is None]
        self._now = t
        self._steps += k
        self._generation_tokens += n * k
        return DecodeRun(
            start_s=start, step_ends_s=tuple(ends), request_ids=ids, finished=tuple(finished)
        )

    def run_until_idle(self, max_steps: int | None = None, *, fast: bool = True) -> int:
        """Step until nothing is running or waiting (virtual time); returns the steps taken.

        Args:
            max_steps: stop after this many steps even if work remains.
            fast: take pure-decode stretches through :meth:`decode_run` (same result).
        """
        steps = 0
        while self._running or self._waiting:
            left = 1 << 30 if max_steps is None else max_steps - steps
            if left <= 0:
                break
            run = self.decode_run(left) if fast else None
            if run is not None:
                steps += run.steps
            else:
                self.step()
                steps += 1
        return steps

    def _register(self, seq: SeqState, full: int) -> None:
        """Offer a sequence's blocks up to ``full`` (now computed) to the prefix cache."""
        if len(seq.hashes) < full:
            extend_block_hashes(seq.hashes, seq.tokens, self.profile.block_size, full)
        self.kv.register_range(seq.blocks, seq.hashes, seq.registered, full)
        seq.registered = full

    def _finish(self, seq: SeqState, now: float) -> None:
        self.kv.free(seq.blocks)
        rec = seq.record
        rec.finish_reason = seq.end_reason
        rec.finished_s = now
        del self._active[seq.rid]
        self._finished += 1

    def _preempt(self, seq: SeqState, now: float) -> None:
        self.kv.free(seq.blocks)
        seq.num_computed = 0
        seq.registered = 0
        rec = seq.record
        rec.num_preemptions += 1
        rec.preempted_at_s.append(now)
        self._waiting.appendleft(seq)
        self._preemptions += 1
