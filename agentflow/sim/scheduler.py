"""The engine's step loop: scheduling, the step's cost, sampling (see :mod:`agentflow.sim.engine`).

:class:`Engine <agentflow.sim.engine.Engine>` gets :meth:`~Engine.step`,
:meth:`~Engine.decode_run`, :meth:`~Engine.run_until_idle` and the block bookkeeping of
a finished, preempted or caught-up sequence from :class:`_Scheduler` here; the engine
module keeps its state, clock and requests. The scheduling policy is described in
:mod:`agentflow.sim.engine`'s docstring.
"""

from __future__ import annotations

from collections import deque

from agentflow.sim.kv import BlockManager, extend_block_hashes
from agentflow.sim.profiles import Profile
from agentflow.sim.records import DecodeRun, StepResult
from agentflow.sim.sequence import ENDED, RUNNING, WAITING, SeqState

__all__: list[str] = []


class _Scheduler:
    """The step loop of :class:`~agentflow.sim.engine.Engine`, which sets this state."""

    profile: Profile
    kv: BlockManager
    _now: float
    _waiting: deque[SeqState]
    _running: list[SeqState]
    _active: dict[int, SeqState]
    _dead_running: int
    _dead_waiting: int
    _steps: int
    _preemptions: int
    _prompt_tokens: int
    _generation_tokens: int
    _computed_prompt_tokens: int
    _finished: int

    # --- The step ----------------------------------------------------------------------

    def step(self) -> StepResult:
        """Run one engine iteration and advance the clock by its duration."""
        start = self._now
        if self._dead_running:
            self._drop_aborted_running()
        running = self._running
        waiting = self._waiting
        if not running and len(waiting) == self._dead_waiting:
            waiting.clear()
            self._dead_waiting = 0
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
                if seq.state == ENDED:  # aborted while waiting
                    waiting.popleft()
                    self._dead_waiting -= 1
                    continue
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
                seq.state = RUNNING
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
        if self._dead_running:
            self._drop_aborted_running()
        running = self._running
        profile = self.profile
        n = len(running)
        if max_steps < 1 or n == 0 or n > profile.max_num_batched_tokens:
            return None
        if len(self._waiting) > self._dead_waiting and n < profile.max_num_seqs:
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
        while len(self._running) > self._dead_running or len(self._waiting) > self._dead_waiting:
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

    def _drop_aborted_running(self) -> None:
        """Take the sequences aborted since the last step out of the batch (in order)."""
        self._running = [s for s in self._running if s.state == RUNNING]
        self._dead_running = 0

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
        seq.state = ENDED
        del self._active[seq.rid]
        self._finished += 1

    def _preempt(self, seq: SeqState, now: float) -> None:
        self.kv.free(seq.blocks)
        seq.num_computed = 0
        seq.registered = 0
        rec = seq.record
        rec.num_preemptions += 1
        rec.preempted_at_s.append(now)
        seq.state = WAITING
        self._waiting.appendleft(seq)
        self._preemptions += 1
