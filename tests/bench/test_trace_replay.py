"""Trace replay on the embedded simulator in virtual time, through the bench runner
(``run_bench`` with ``BenchConfig.scripts``), recorded by :class:`TraceRecorder`:

- the shipped trace replays with every session arriving exactly at its (scaled)
  timestamp and every later request exactly its (scaled) tool and think time after
  the previous response; every request sent with its text or length and output length;
- round trip: a synthetic bench run, recorded, replays with the same sessions, turns,
  prompt and output lengths, arrivals and gaps — and records again to the same trace;
- a tool-calling agent run in the durable store exports to the same trace as the live
  run, tool results and tool gaps included.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentflow import Agent, Fleet, FleetResult
from agentflow.bench import (
    BenchConfig,
    LogNormal,
    SessionScript,
    SessionTemplate,
    TraceRecord,
    TraceRecorder,
    Uniform,
    Workload,
    read_trace,
    record_result,
    record_store,
    run_bench,
    shipped_trace,
    trace_scripts,
    write_trace,
)
from agentflow.bench._bench import SimTarget
from agentflow.bench._load import Load, plan_sessions
from agentflow.embedded import SimTransport, loop_clock, run_virtual
from agentflow.sim import Engine, TextGenConfig
from agentflow.sim.driver import EngineDriver
from agentflow.store import SQLiteStore

EXACT = 1e-6  # virtual time: equal up to the nanosecond rounding of the fleet's clock


def _replay(
    scripts: Sequence[SessionScript], *, seed: int = 0, profile: str = "qwen2.5-coder-32b"
) -> tuple[list[TraceRecord], dict[str, Any]]:
    """Run ``scripts`` as one bench level on the simulator; the recorded trace and the report."""
    recorder = TraceRecorder()
    report = run_bench(
        BenchConfig(
            scripts=tuple(scripts),
            levels=(Load(scale=1.0),),
            duration_s=None,
            seed=seed,
            params={"temperature": 0, "ignore_eos": True},
            callbacks=(recorder,),
        ),
        SimTarget(profile=profile),
    )
    return recorder.records(), report


def _by_session(records: Sequence[TraceRecord]) -> dict[str, list[TraceRecord]]:
    out: dict[str, list[TraceRecord]] = {}
    for r in records:
        out.setdefault(r.session_id, []).append(r)
    return out


def _gap(r: TraceRecord) -> float:
    return (r.tool_s or 0.0) + (r.think_s or 0.0)


@pytest.mark.parametrize("scale", [1.0, 0.5, 4.0])
def test_shipped_trace_replays_on_schedule(scale: float) -> None:
    """Every session of the shipped trace starts exactly at its scaled arrival; every
    later request goes exactly its scaled tool + think time after the previous
    response; each request carries its text (or its length in synthetic tokens) and
    gets exactly its recorded output length."""
    trace = read_trace(shipped_trace("agentic-small"))
    scripts = trace_scripts(trace, time_scale=scale)
    recorded, report = _replay(scripts)
    got = _by_session(recorded)
    assert set(got) == {s.session_id for s in scripts}
    assert len(recorded) == len(trace) == 7
    for s in scripts:
        reqs = got[s.session_id]
        assert [r.turn for r in reqs] == list(range(len(s.turns)))  # the turn structure
        assert reqs[0].timestamp == pytest.approx(s.arrival_s, abs=EXACT)
        for k, (turn, r) in enumerate(zip(s.turns, reqs, strict=True)):
            assert r.output_tokens == turn.max_tokens
            sent = "\n\n".join(m.content for m in r.messages or ())
            assert sent == s.turn_text(k)  # its text, or its synthetic text
            if k:
                assert _gap(r) == pytest.approx(turn.tool_s + turn.think_s, abs=EXACT)
                assert r.timestamp == pytest.approx(
                    reqs[k - 1].timestamp + (reqs[k - 1].duration_s or 0) + _gap(r), abs=EXACT
                )
        assert reqs[0].system == s.system
    # The scaled arrivals are the trace's own: 0, 0.5, 1.0 s times the scale.
    firsts = sorted(got[sid][0].timestamp for sid in got)
    assert firsts == pytest.approx([0.0, 0.5 * scale, 1.0 * scale], abs=EXACT)
    # A lengths-only turn sends that many synthetic one-token words.
    assert [len(m.content.split()) for m in got["lengths"][1].messages or ()] == [32]
    (level,) = report["levels"]
    assert level["turns"] == 7 and level["statuses"]["completed"] == 3


AGENTIC = Workload(
    name="roundtrip",
    shared_prefix_tokens=300,
    group_prefix_tokens={"g": 50},
    templates=(
        SessionTemplate(
            name="coder",
            group="g",
            turns=Uniform(low=2, high=5),
            first_prompt_tokens=120,
            prompt_tokens=LogNormal(mean=60, sigma=0.6, low=8, high=400),
            output_tokens=Uniform(low=8, high=64),
            tool_latency_s=LogNormal(mean=0.4, sigma=0.8),
            think_time_s=Uniform(low=0.0, high=1.5),
        ),
        SessionTemplate(name="chat", turns=2, prompt_tokens=40, output_tokens=24),
    ),
)


def _bench_recorded(load: Load, duration_s: float) -> list[TraceRecord]:
    recorder = TraceRecorder()
    run_bench(
        BenchConfig(
            workload=AGENTIC,
            levels=(load,),
            duration_s=duration_s,
            drain_s=600.0,
            callbacks=(recorder,),
        ),
        SimTarget(),
    )
    return recorder.records()


def test_round_trip_bench_record_replay(tmp_path: Path) -> None:
    """A synthetic bench run, recorded, written and read back, replays with the same
    sessions and turn structure, the same prompt and output lengths per request (as the
    server counted them), the same arrivals and gaps; and recording the replay gives
    the same trace again (times and lengths)."""
    load = Load(rate=1.5, arrival="poisson")
    first = _bench_recorded(load, 12.0)
    planned = plan_sessions(AGENTIC, load, duration_s=12.0, seed=0)
    # The recording holds the run as planned: every session, turn and length.
    got = _by_session(first)
    assert len(got) == len(planned) >= 10
    for s in planned:
        reqs = got[s.session_id]
        assert len(reqs) == len(s.turns)
        assert reqs[0].timestamp == pytest.approx(s.arrival_s, abs=EXACT)
        assert [r.output_tokens for r in reqs] == [t.max_tokens for t in s.turns]
        assert [_gap(r) for r in reqs[1:]] == pytest.approx(
            [t.tool_s + t.think_s for t in s.turns[1:]], abs=EXACT
        )
        # Later turns' input from usage: the message, and the chat template's few tokens.
        for r, t in zip(reqs[1:], s.turns[1:], strict=True):
            assert r.input_tokens is not None and t.tokens <= r.input_tokens <= t.tokens + 16
    path = tmp_path / "run.jsonl"
    write_trace(first, path)
    second, _ = _replay(trace_scripts(read_trace(path)))
    assert len(second) == len(first) > 2 * len(planned)

    def shape(records: Sequence[TraceRecord]) -> list[tuple[object, ...]]:
        return [
            (r.session_id, r.turn, r.prompt_tokens, r.output_tokens, r.input_tokens, r.agent)
            for r in sorted(records, key=lambda r: (r.session_id, r.turn or 0))
        ]

    assert shape(second) == shape(first)
    a = {(r.session_id, r.turn): r for r in first}
    for r in second:
        o = a[(r.session_id, r.turn)]
        assert r.timestamp == pytest.approx(o.timestamp, abs=EXACT)  # same server, same times
        assert _gap(r) == pytest.approx(_gap(o), abs=EXACT)
        assert r.messages == o.messages and r.system == o.system


def test_time_scale_compresses_a_recording() -> None:
    """Replayed at 0.25 × its times, a recording's arrivals and gaps are a quarter of
    the recorded ones, exactly."""
    first = _bench_recorded(Load(rate=1.0, arrival="constant"), 6.0)
    fast, _ = _replay(trace_scripts(first, time_scale=0.25))
    a = {(r.session_id, r.turn): r for r in first}
    firsts = {r.session_id: r.timestamp for r in first if r.turn == 0}
    for r in fast:
        o = a[(r.session_id, r.turn)]
        if r.turn == 0:
            assert r.timestamp == pytest.approx(firsts[r.session_id] * 0.25, abs=EXACT)
        else:
            assert _gap(r) == pytest.approx(_gap(o) * 0.25, abs=EXACT)
        assert (r.output_tokens, r.prompt_tokens) == (o.output_tokens, o.prompt_tokens)


# ---- the durable store ---------------------------------------------------------------


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up.
    """
    return f"value of {key!r}"


def test_store_run_exports_like_the_live_run(tmp_path: Path) -> None:
    """A tool-calling fleet run recorded in a SQLite store exports to the trace its
    live result (and a TraceRecorder on the fleet) gives: tool results as ``tool``
    messages, the gap before each turn after a tool call as ``tool_s``; and that trace
    replays on the simulator with the same sessions and turns."""
    agent = Agent(
        name="looker",
        model="sim",
        instructions="You look things up. " * 8,
        tools=[lookup],
        params={"max_tokens": 32},
        max_turns=8,
    )
    path = tmp_path / "runs.db"
    recorder = TraceRecorder()

    async def main() -> tuple[FleetResult, list[TraceRecord]]:
        engine = Engine(
            "deepseek-v4.1-flash-gb300",
            seed=5,
            textgen=TextGenConfig(tool_rounds=2, answer_tokens=(8, 24), tool_calls_per_turn=(1, 2)),
        )
        transport = SimTransport(EngineDriver(engine))
        store = SQLiteStore(path)
        try:
            fleet = Fleet(
                transport, max_concurrency=3, clock=loop_clock, store=store, callbacks=[recorder]
            )
            result = await fleet.run(
                [agent.session(f"task {i}", session_id=f"s{i}") for i in range(5)]
            )
            return result, await record_store(store, result.run_id or "")
        finally:
            await store.aclose()
            await transport.aclose()

    result, stored = run_virtual(main())
    live = record_result(result)
    assert stored == live == recorder.records()
    assert len(live) == sum(len(s.turns) for s in result.sessions) >= 10
    tool_turns = [r for r in live if r.messages and any(m.role == "tool" for m in r.messages)]
    assert tool_turns and all(r.tool_s is not None and r.think_s is None for r in tool_turns)
    assert all(m.name == "lookup" for r in tool_turns for m in r.messages or () if m.role == "tool")
    assert all(r.system and r.system.startswith("You look things up.") for r in live if r.turn == 0)
    lengths_only = record_result(result, with_text=False)
    assert all(r.messages is None and r.system is None for r in lengths_only)
    assert all(r.input_tokens for r in lengths_only)
    assert [r.input_tokens for r in lengths_only if r.turn == 0] == [
        r.prompt_tokens for r in live if r.turn == 0
    ]
    replayed, _ = _replay(trace_scripts(live))
    assert sorted((r.session_id, r.turn, r.output_tokens) for r in replayed) == sorted(
        (r.session_id, r.turn, r.output_tokens) for r in live
    )


# ---- Mooncake's prefix sharing, on the simulator's prefix cache -------------------------


def test_mooncake_shared_blocks_hit_the_simulators_cache() -> None:
    """A converted Mooncake trace keeps its prefix sharing: a request whose hash_ids
    start with two blocks an earlier request also had gets (at least) those 1024 tokens
    from the simulator's prefix cache, as its usage reports; one that shares no block
    gets none of them."""
    from agentflow import Event, TurnEndEvent
    from agentflow.bench import read_mooncake
    from agentflow.sim.profiles import get_profile

    block = get_profile("qwen2.5-coder-32b").block_size
    rows = [
        '{"timestamp": 0, "input_length": 1600, "output_length": 8, "hash_ids": [1, 2, 3, 4]}',
        '{"timestamp": 5000, "input_length": 1300, "output_length": 8, "hash_ids": [1, 2, 9]}',
        '{"timestamp": 10000, "input_length": 600, "output_length": 8, "hash_ids": [7, 8]}',
    ]
    cached: dict[str, int | None] = {}

    def capture(event: Event) -> None:
        if isinstance(event, TurnEndEvent):
            cached[event.session_id] = event.metrics.cached_tokens

    run_bench(
        BenchConfig(
            scripts=tuple(trace_scripts(read_mooncake(rows))),
            levels=(Load(scale=1.0),),
            duration_s=None,
            params={"temperature": 0, "ignore_eos": True},
            callbacks=(capture,),
        ),
        SimTarget(),
    )
    first, second, third = (cached[f"mooncake-{i}"] for i in (1, 2, 3))
    assert first is not None and second is not None and third is not None
    assert first < block  # a cold cache
    assert second >= 2 * 512 - block  # the two shared blocks (whole cache blocks of them)
    assert third < block  # nothing shared
