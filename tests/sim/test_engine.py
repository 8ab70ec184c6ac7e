"""The engine: admission, chunked prefill, preemption, timing, determinism, limits."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.sim import Engine, EngineRequest, RequestRejected, StepResult, get_profile

from .util import TINY, request, run, tiny, tokens

BS = 16


def test_idle_step_does_nothing() -> None:
    engine = Engine(TINY)
    step = engine.step()
    assert step.idle and step.duration_s == 0.0 and engine.now == 0.0
    engine.advance_to(2.5)
    assert engine.now == 2.5
    with pytest.raises(ValueError, match="cannot go back"):
        engine.advance_to(1.0)


def test_admission_is_fcfs_under_max_num_seqs() -> None:
    engine = Engine(TINY)
    ids = [engine.add(request(tokens(i, 20), 30 + i)) for i in range(12)]
    first = engine.step()
    assert first.admitted == tuple(ids[:8])
    assert engine.num_running == 8 and engine.num_waiting == 4
    max_running = 0
    while engine.has_work:
        engine.step()
        max_running = max(max_running, engine.num_running)
    assert max_running == TINY.max_num_seqs
    admitted = [engine.record(i).admitted_s for i in ids]
    assert all(a is not None for a in admitted)
    assert admitted == sorted(admitted)  # type: ignore[type-var]
    # The 9th waits for the first finisher (the one with the fewest output tokens).
    assert engine.record(ids[8]).admitted_s == engine.record(ids[0]).finished_s
    assert all(engine.record(i).completion_tokens == 30 + i for i in ids)


def test_chunked_prefill_respects_the_token_budget() -> None:
    engine = Engine(TINY)
    decoding = engine.add(request(tokens(1, 10), 200))
    engine.step()
    assert engine.record(decoding).completion_tokens == 1
    long = engine.add(request(tokens(2, 1000), 5))
    steps = []
    while engine.record(long).completion_tokens == 0:
        steps.append(engine.step())
    # The decode takes one token of each 256-token step; the prompt gets the rest.
    assert [s.num_prefill_tokens for s in steps] == [255, 255, 255, 235]
    assert all(s.num_decode_seqs == 1 for s in steps)
    rec = engine.record(long)
    assert rec.prefill_start_s == steps[0].start_s
    assert rec.prefill_end_s == steps[-1].end_s == rec.token_times_s[0]
    assert rec.prefill_s == pytest.approx(sum(s.duration_s for s in steps))


@settings(max_examples=40, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 300)), min_size=1, max_size=20),
    shared=st.integers(0, 400),
)
def test_invariants_hold_on_random_workloads(lens: list[tuple[int, int]], shared: int) -> None:
    engine = Engine(TINY)
    prefix = tokens(99, shared)
    ids = []
    for i, (p, o) in enumerate(lens):
        prompt = (prefix + tokens(i, p))[: TINY.max_model_len - o]
        ids.append(engine.add(request(prompt, o)))
    steps = 0
    while engine.has_work:
        s = engine.step()
        steps += 1
        assert s.num_prefill_tokens + s.num_decode_seqs <= TINY.max_num_batched_tokens
        assert engine.num_running <= TINY.max_num_seqs
        assert 0 <= engine.kv.used_blocks <= TINY.kv_capacity_tokens // BS
        assert steps < 100_000
    assert engine.kv.used_blocks == 0
    for rid, (_, o) in zip(ids, lens, strict=True):
        rec = engine.record(rid)
        assert rec.completion_tokens == o and rec.finish_reason == "stop"
        assert rec.token_times_s == sorted(rec.token_times_s)
        assert (
            rec.arrival_s <= (rec.admitted_s or 0) <= rec.token_times_s[0] <= (rec.finished_s or 0)
        )


def test_kv_exhaustion_preempts_the_newest_and_recomputes_it_later() -> None:
    # 4 × (600 prompt + 500 output) tokens need 4 × 69 blocks; cpu-tiny has 256.
    engine = Engine(TINY)
    ids = [engine.add(request(tokens(i, 600), 500)) for i in range(4)]
    preemptions: list[tuple[StepResult, tuple[int, ...]]] = []
    while engine.has_work:
        before = engine.running_ids
        step = engine.step()
        if step.preempted:
            preemptions.append((step, before))
    assert preemptions, "KV never ran out"
    step, before = preemptions[0]
    # The first victim is the newest running sequence.
    assert step.preempted[0] == max(before) == before[-1]
    victim = engine.record(step.preempted[0])
    assert victim.num_preemptions >= 1 and victim.preempted_at_s[0] == step.start_s
    assert victim.recomputed_tokens > 0
    # It resumed and still produced every token; the client saw a stall, not a loss.
    assert victim.completion_tokens == 500 and victim.finish_reason == "stop"
    gaps = victim.itl_s()
    assert max(gaps) > 5 * min(gaps)
    # The oldest request was never preempted.
    assert engine.record(ids[0]).num_preemptions == 0
    stats = engine.stats()
    assert stats.num_preemptions == sum(engine.record(i).num_preemptions for i in ids)
    assert stats.preempted_prefix_cache_queries > 0
    assert engine.kv.used_blocks == 0


def test_a_preempted_request_goes_back_to_the_front_of_the_queue() -> None:
    engine = Engine(tiny(max_num_seqs=3))
    ids = [engine.add(request(tokens(i, 1000), 1000)) for i in range(3)]
    late = engine.add(request(tokens(9, 20), 20))
    while True:
        assert engine.has_work
        step = engine.step()
        if step.preempted:
            break
    assert step.preempted == (ids[2],)
    assert engine.waiting_ids == (ids[2], late)
    assert engine.running_ids == tuple(ids[:2])


def test_single_sequence_decodes_at_the_profile_speed() -> None:
    p = TINY
    engine = Engine(p)
    rid = engine.add(request(tokens(1, 100), 50))
    run(engine)
    rec = engine.record(rid)
    gaps = rec.itl_s()
    # Each gap is one decode step of one sequence attending its context so far.
    expected = [p.decode_step_s(1, 100 + k + 1) for k in range(49)]
    assert gaps == pytest.approx(expected, rel=1e-9)
    assert rec.tpot_s is not None
    assert 1 / rec.tpot_s == pytest.approx(p.per_agent_tps, rel=0.02)


@pytest.mark.parametrize(
    "name", ["deepseek-v4.1-flash-gb300", "deepseek-v4-gb300", "qwen2.5-coder-32b"]
)
def test_rack_profiles_decode_one_agent_at_the_stated_speed(name: str) -> None:
    p = get_profile(name)
    engine = Engine(p)
    rid = engine.add(request(tokens(1, p.calibration_context_tokens), 64))
    run(engine)
    tpot = engine.record(rid).tpot_s
    assert tpot is not None
    assert 1 / tpot == pytest.approx(p.per_agent_tps, rel=1e-3)


def test_more_sequences_and_context_slow_each_agent() -> None:
    p = get_profile("qwen2.5-coder-32b")
    engine = Engine(p)
    ids = [engine.add(request(tokens(i, 8000), 100)) for i in range(64)]
    while True:
        context = sum(8000 + engine.record(i).completion_tokens for i in ids)
        step = engine.step()
        if step.num_decode_seqs == 64:
            break
    assert step.num_prefill_tokens == 0
    assert step.duration_s == pytest.approx(p.decode_step_s(64, context), rel=1e-12)
    assert 1 / step.duration_s < 0.5 * p.per_agent_tps


def test_cached_prompt_tokens_cost_no_prefill() -> None:
    base = tokens(1, 512)
    fresh = base + tokens(2, 40)

    def first_step(caching: bool) -> tuple[StepResult, int | None]:
        engine = Engine(tiny(max_num_batched_tokens=2048), enable_prefix_caching=caching)
        engine.add(request(base, 3))
        run(engine)
        rid = engine.add(request(fresh, 3))
        return engine.step(), engine.record(rid).cached_tokens

    hit_step, cached = first_step(True)
    miss_step, none_cached = first_step(False)
    assert cached == 512 and none_cached == 0
    assert hit_step.num_prefill_tokens == len(fresh) - 512
    assert miss_step.num_prefill_tokens == len(fresh)
    n = len(fresh) - 512
    assert hit_step.duration_s == pytest.approx(TINY.step_s(0, 0, n, 0), rel=1e-12)
    assert miss_step.duration_s - hit_step.duration_s == pytest.approx(512 / TINY.prefill_tps)


def test_prefill_attention_term_grows_with_context() -> None:
    p = tiny(prefill_per_ctx_token_s=1e-8, max_num_batched_tokens=2048)
    engine = Engine(p)
    engine.add(request(tokens(1, 1000), 2))
    step = engine.step()
    expected = p.step_s(0, 0, 1000, 1000 * 1001 // 2)
    assert step.duration_s == pytest.approx(expected, rel=1e-12)
    assert step.duration_s > TINY.step_s(0, 0, 1000, 0) + 0.004


def test_whole_prompt_cached_still_computes_its_last_token() -> None:
    engine = Engine(TINY)
    prompt = tokens(1, 64)
    engine.add(request(prompt, 1))
    run(engine)
    rid = engine.add(request(prompt, 1))
    step = engine.step()
    assert engine.record(rid).cached_tokens == 48 and step.num_prefill_tokens == 16


def _workload(engine: Engine) -> list[int]:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "run_tests",
                "parameters": {
                    "type": "object",
                    "properties": {"target": {"type": "string"}, "verbose": {"type": "boolean"}},
                    "required": ["target"],
                },
            },
        }
    ]
    ids = []
    for i in range(12):
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": f"You are agent number {i % 3}."},
            {"role": "user", "content": f"task {i}: make the build green"},
        ]
        ids.append(engine.add_chat(msgs, tools=tools if i % 2 else None, max_tokens=300))
        for _ in range(i % 4):
            engine.step()
    run(engine)
    return ids


def test_same_seed_same_outputs_and_timings() -> None:
    a, b, c = Engine(TINY, seed=11), Engine(TINY, seed=11), Engine(TINY, seed=12)
    ia, ib, ic = _workload(a), _workload(b), _workload(c)
    assert [a.record(i) for i in ia] == [b.record(i) for i in ib]
    assert a.stats() == b.stats()
    assert [a.record(i).plan for i in ia] != [c.record(i).plan for i in ic]


def test_prompt_at_the_window_is_rejected_with_vllms_message() -> None:
    engine = Engine(TINY)
    with pytest.raises(RequestRejected) as err:
        engine.add(request(tokens(1, 2048), 5))
    assert err.value.status == 400
    assert err.value.message == (
        "This model's maximum context length is 2048 tokens. However, your request has 2048 "
        "input tokens. Please reduce the length of the input messages."
    )
    assert err.value.body() == {
        "error": {
            "message": err.value.message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    with pytest.raises(RequestRejected, match=r"is too large: 100\. .* \(100 > 2048 - 2000\)"):
        engine.add(request(tokens(1, 2000), 5, max_tokens=100))
    with pytest.raises(RequestRejected, match="maximum context length is 2048"):
        engine.add_chat([{"role": "user", "content": "word " * 3000}])
    assert not engine.has_work


def test_default_max_tokens_is_what_the_window_leaves() -> None:
    engine = Engine(TINY)
    rid = engine.add(request(tokens(1, 2000), 500))
    run(engine)
    rec = engine.record(rid)
    assert rec.max_tokens == 48
    assert rec.completion_tokens == 48 and rec.finish_reason == "length"


def test_max_tokens_cuts_the_output() -> None:
    engine = Engine(TINY)
    short = engine.add(request(tokens(1, 10), 100, max_tokens=7))
    exact = engine.add(request(tokens(2, 10), 7, max_tokens=7))
    run(engine)
    assert engine.record(short).completion_tokens == 7
    assert engine.record(short).finish_reason == "length"
    assert engine.record(exact).finish_reason == "stop"


def test_abort_frees_the_request() -> None:
    engine = Engine(tiny(max_num_seqs=1))
    running = engine.add(request(tokens(1, 100), 100))
    waiting = engine.add(request(tokens(2, 100), 100))
    engine.step()
    assert engine.kv.used_blocks > 0
    assert engine.abort(running) and engine.abort(waiting)
    assert not engine.abort(running) and not engine.abort(12345)
    assert engine.kv.used_blocks == 0 and not engine.has_work
    assert engine.record(running).finish_reason == "abort"
    assert engine.record(waiting).admitted_s is None
    assert engine.stats().requests_aborted == 2
    assert engine.pop_record(running).request_id == running
    with pytest.raises(KeyError):
        engine.record(running)


def test_pop_record_refuses_a_running_request() -> None:
    engine = Engine(TINY)
    rid = engine.add(request(tokens(1, 10), 10))
    with pytest.raises(ValueError, match="not finished"):
        engine.pop_record(rid)


def test_arrival_times_and_queue_time() -> None:
    engine = Engine(tiny(max_num_seqs=1))
    first = engine.add(request(tokens(1, 10), 20))
    engine.step()
    second = engine.add(request(tokens(2, 10), 20), arrival_s=engine.now / 2)
    with pytest.raises(ValueError, match="after the engine clock"):
        engine.add(request(tokens(3, 10), 1), arrival_s=engine.now + 1)
    run(engine)
    rec = engine.record(second)
    assert rec.arrival_s == pytest.approx(engine.record(first).token_times_s[0] / 2)
    assert rec.queue_s == pytest.approx(engine.record(first).finished_s - rec.arrival_s)  # type: ignore[operator]
    timings = rec.timings()
    assert timings["predicted_n"] == 20 and timings["cache_n"] == 0
    assert timings["queue_ms"] == pytest.approx(rec.queue_s * 1000)  # type: ignore[operator]
    assert timings["predicted_per_token_ms"] == pytest.approx(rec.tpot_s * 1000)  # type: ignore[operator]


def test_requests_must_plan_output() -> None:
    with pytest.raises(ValueError, match="at least one output token"):
        Engine(TINY).add(EngineRequest(prompt_ids=[20, 21], output_ids=[]))


def _lines_per_decode_step(seqs: int) -> int:
    """Python lines executed by one decode step over ``seqs`` running sequences."""
    engine = Engine(get_profile("qwen2.5-coder-32b"))
    for i in range(seqs):
        engine.add(request(tokens(i, 500), 2000))
    while engine.stats().generation_tokens < seqs or engine.num_waiting:
        engine.step()
    assert engine.num_running == seqs
    lines = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return trace

    sys.settrace(trace)
    try:
        step = engine.step()
    finally:
        sys.settrace(None)
    assert step.num_decode_seqs == seqs
    return lines


def test_a_decode_step_costs_linear_work() -> None:
    """Guards the hot path against accidental O(n²) work, by counting the Python lines a
    step runs (deterministic, unlike its time on a shared machine): four times the
    sequences cost at most about four times the lines (measured: 1,664 and 6,928; speed
    itself is for ``benchmarks/sim_throughput.py``, which drives the engine at full rate.)"""
    small, large = _lines_per_decode_step(64), _lines_per_decode_step(256)
    assert large <= 4.5 * small, (small, large)


def _drive(engine: Engine, arrivals: list[tuple[float, EngineRequest]], bulk: int) -> list[int]:
    """Feed requests at their arrival times; step one at a time, or in decode runs of ≤ bulk."""
    ids = []
    for t, req in [*arrivals, (float("inf"), None)]:
        while engine.has_work and engine.now < t:
            if not (bulk and engine.decode_run(bulk, until_s=t)):
                engine.step()
        if req is None:
            break
        engine.advance_to(max(engine.now, t))
        ids.append(engine.add(req))
    return ids


@settings(max_examples=40, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(st.floats(0, 0.3), st.integers(0, 3), st.integers(1, 600), st.integers(1, 400)),
        min_size=1,
        max_size=14,
    ),
    bulk=st.integers(1, 64),
    max_seqs=st.integers(1, 8),
)
def test_decode_runs_equal_step_by_step(
    reqs: list[tuple[float, int, int, int]], bulk: int, max_seqs: int
) -> None:
    # Few distinct prompts, so identical requests (and identical output blocks) recur.
    arrivals = [
        (t, request(tokens(kind, p), o, out_seed=kind))
        for t, kind, p, o in sorted(reqs, key=lambda r: r[0])
    ]
    # Half the KV of cpu-tiny: evictions and preemptions happen too.
    profile = tiny(max_num_seqs=max_seqs, kv_capacity_tokens=2048)
    a, b = Engine(profile), Engine(profile)
    ids_a = _drive(a, arrivals, 0)
    ids_b = _drive(b, arrivals, bulk)
    assert [a.record(i) for i in ids_a] == [b.record(i) for i in ids_b]
    assert a.stats() == b.stats()
    assert a.kv.free_order() == b.kv.free_order()


def test_decode_run_declines_when_a_step_is_needed() -> None:
    engine = Engine(TINY)
    assert engine.decode_run(10) is None  # nothing running
    rid = engine.add(request(tokens(1, 300), 40))
    assert engine.decode_run(10) is None  # prefill first: two chunks of ≤ 256
    engine.step()
    assert engine.decode_run(10) is None
    engine.step()
    run = engine.decode_run(10)
    assert run is not None and run.steps == 10 and run.request_ids == (rid,)
    assert engine.record(rid).token_times_s[-10:] == list(run.step_ends_s)
    assert engine.now == run.end_s
    waiting = engine.add(request(tokens(2, 30), 5))
    assert engine.decode_run(10) is None  # a request could be admitted
    engine.run_until_idle()
    assert engine.record(rid).finish_reason == engine.record(waiting).finish_reason == "stop"
    last = engine.record(rid)
    assert last.completion_tokens == 40


def test_decode_run_stops_at_the_first_finish_and_at_until() -> None:
    engine = Engine(TINY)
    short = engine.add(request(tokens(1, 20), 5))
    long = engine.add(request(tokens(2, 20), 50))
    engine.step()
    run = engine.decode_run(100)
    assert run is not None and run.finished == (short,) and run.steps == 4
    assert engine.record(short).finished_s == run.end_s
    assert engine.running_ids == (long,)
    until = engine.now + 0.0035
    run = engine.decode_run(100, until_s=until)
    assert run is not None and run.end_s >= until > run.step_ends_s[-2]
