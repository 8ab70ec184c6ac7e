"""Fan-out/fan-in on the simulator: sub-agents start from a fresh context that shares the
parent's prefix, and the server's prefix cache serves that prefix to them — measured from
the server's own usage fields (``prompt_tokens_details.cached_tokens``). And the
cache-busting option makes a session's first turn miss even a warm shared prefix."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agentflow import Fleet
from agentflow._events import Event, TurnEndEvent
from agentflow.bench import FanOut, SessionTemplate, Workload
from agentflow.bench._bench import BenchConfig, SimTarget, run_bench
from agentflow.bench._level import LevelResult, LevelTap, run_level
from agentflow.bench._load import Load, plan_sessions
from agentflow.embedded import run_virtual
from agentflow.sim.profiles import get_profile

SHARED, GROUP = 1000, 200  # tokens of the global and the group prefix
BLOCK = get_profile("qwen2.5-coder-32b").block_size
SUB_TASK, SUB_OUT, WIDTH = 32, 16, 4

FANOUT = Workload(
    name="fan",
    shared_prefix_tokens=SHARED,
    group_prefix_tokens={"team": GROUP},
    templates=(
        SessionTemplate(
            name="parent",
            group="team",
            turns=3,
            prompt_tokens=64,
            output_tokens=40,
            tool_latency_s=0.2,
            fanout=FanOut(template="sub", width=WIDTH, max_forks=1),
        ),
        SessionTemplate(
            name="sub",
            weight=0,
            group="team",
            turns=1,
            prompt_tokens=SUB_TASK,
            output_tokens=SUB_OUT,
        ),
    ),
)


@dataclass
class Turns:
    """Every finished turn, by agent label."""

    by_agent: dict[str, list[TurnEndEvent]] = field(default_factory=dict)

    def __call__(self, event: Event) -> None:
        if isinstance(event, TurnEndEvent):
            self.by_agent.setdefault(event.agent, []).append(event)


def _run(workload: Workload, load: Load, duration_s: float) -> tuple[LevelResult, Turns]:
    scripts = plan_sessions(workload, load, duration_s=duration_s, seed=0)
    target = SimTarget(profile="qwen2.5-coder-32b")
    turns = Turns()

    async def main() -> LevelResult:
        tap = LevelTap()
        async with target.open(scripts, 0) as transport:
            fleet = Fleet(
                transport, callbacks=[tap, turns], clock=target.clock(), prefix_warmup=False
            )
            return await run_level(
                fleet,
                tap,
                scripts,
                load=load,
                model="m",
                params={},
                duration_s=None,
                clock=target.clock(),
            )

    return run_virtual(main()), turns


def test_subagents_share_the_parents_prefix_in_the_cache() -> None:
    """Each parent forks 4 sub-agents after its first turn and waits for them. Their
    prompts are the parent's system prompt (1,200 tokens of shared prefix) plus a
    32-token task: every whole block of the shared part is served from the cache, so
    each sub-agent's hit rate is at least (1200 − one block) / its prompt length."""
    level, turns = _run(FANOUT, Load(rate=0.5, arrival="constant"), 20.0)
    subs = turns.by_agent["sub"]
    parents = turns.by_agent["parent"]
    n_parents = level.summary["sessions"]["started"]
    assert n_parents == 10
    assert len(subs) == WIDTH * n_parents == level.summary["sessions"]["subagents"]
    assert len(parents) == 3 * n_parents
    for e in subs:
        prompt, cached = e.metrics.prompt_tokens, e.metrics.cached_tokens
        assert prompt is not None and cached is not None
        assert prompt >= SHARED + GROUP + SUB_TASK  # the fresh context: prefix + own task
        bound = (SHARED + GROUP - BLOCK) / prompt
        assert cached / prompt >= bound > 0.9
    # The first parent's first turn found a cold cache; every later session's first
    # turn hit the global + group prefix the earlier ones left.
    firsts = sorted((e for e in parents if e.turn == 0), key=lambda e: e.trace.sent_ns)
    assert firsts[0].metrics.cached_tokens == 0
    assert all((e.metrics.cached_tokens or 0) >= SHARED + GROUP - BLOCK for e in firsts[1:])
    # Fan-in: the parent's next prompt holds the 4 answers (each SUB_OUT tokens).
    for sid in {e.session_id for e in parents}:
        t = sorted((e for e in parents if e.session_id == sid), key=lambda e: e.turn)
        grew = (t[1].metrics.prompt_tokens or 0) - (t[0].metrics.prompt_tokens or 0)
        assert grew >= t[0].metrics.output_tokens + 64 + WIDTH * SUB_OUT
        # …and it was sent only after the last sub-agent of its fork had finished.
        mine = [e for e in subs if e.session_id.startswith(sid + "/")]
        assert len(mine) == WIDTH
        assert t[1].trace.sent_ns >= max(e.trace.end_ns for e in mine)


def test_fanout_hit_rate_in_the_bench_report() -> None:
    """The level's report carries the fleet-wide hit rate from the server's usage
    fields; with 4 sub-agents per parent reusing 1,200 prefix tokens it is high."""
    report = run_bench(
        BenchConfig(workload=FANOUT, levels=(Load(rate=0.5),), duration_s=20.0, warmup_s=0.0),
        SimTarget(profile="qwen2.5-coder-32b"),
    )
    (level,) = report["levels"]
    assert level["cached_tokens"] > 0
    assert level["cache_hit_rate"] == pytest.approx(level["cached_tokens"] / level["prompt_tokens"])
    assert level["cache_hit_rate"] > 0.8
    full = level["repeats"][0]["report"]
    assert full["schema_version"] == "agentflow.report/2"
    assert full["fleet"]["cache_hit_rate"] == level["cache_hit_rate"]


def test_cache_bust_makes_the_first_turn_miss() -> None:
    """With ``cache_bust`` the shared prefix is no help to a session's first turn (a
    unique marker starts its system prompt); its later turns hit its own history."""
    busted = Workload(
        name="bust",
        shared_prefix_tokens=SHARED,
        templates=(
            SessionTemplate(name="a", turns=2, prompt_tokens=32, output_tokens=16, cache_bust=True),
        ),
    )
    _, turns = _run(busted, Load(rate=1.0, arrival="constant"), 10.0)
    events = turns.by_agent["a"]
    first = [e for e in events if e.turn == 0]
    second = [e for e in events if e.turn == 1]
    assert len(first) == len(second) == 10
    assert all((e.metrics.cached_tokens or 0) < BLOCK for e in first)
    for e in second:
        assert (e.metrics.cached_tokens or 0) >= SHARED  # its own first turn, cached
