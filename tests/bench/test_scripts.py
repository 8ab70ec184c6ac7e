"""Hand-made scripts — what a trace replay produces — run as recorded: arrivals (at a
replay speed), the recorded gaps between turns, the recorded texts and output limits."""

from __future__ import annotations

import pytest

from agentflow import ConfigError, Fleet
from agentflow._events import Event, TurnEndEvent
from agentflow.bench import (
    BenchConfig,
    Load,
    SessionScript,
    SessionTemplate,
    SimTarget,
    Sweep,
    TurnScript,
    Workload,
    replay_sessions,
    run_bench,
)
from agentflow.bench._level import LevelResult, LevelTap, run_level
from agentflow.embedded import run_virtual
from agentflow.sim.tokenizer import Tokenizer


def recorded(n: int) -> list[SessionScript]:
    """n sessions, one every 2 s, each: a task, a 1.5 s tool gap, a 3 s think gap."""
    return [
        SessionScript(
            session_id=f"rec-{i}",
            arrival_s=2.0 * i,
            agent="recorded",
            system="You are a recorded agent.",
            system_key="rec",
            turns=(
                TurnScript(text=f"Task {i}: list the files.", max_tokens=12),
                TurnScript(tokens=40, max_tokens=8, tool_s=1.5),
                TurnScript(text="And now summarise.", max_tokens=20, tool_s=0.5, think_s=3.0),
            ),
        )
        for i in range(n)
    ]


def _run(scripts: list[SessionScript], load: Load) -> tuple[LevelResult, list[TurnEndEvent]]:
    target = SimTarget(profile="cpu-tiny")
    turns: list[TurnEndEvent] = []

    def collect(event: Event) -> None:
        if isinstance(event, TurnEndEvent):
            turns.append(event)

    async def main() -> LevelResult:
        tap = LevelTap()
        planned = replay_sessions(scripts, load)
        async with target.open(planned, 0) as transport:
            fleet = Fleet(transport, callbacks=[tap, collect], clock=target.clock())
            return await run_level(
                fleet, tap, planned, load=load, model="m", params={}, duration_s=None,
                clock=target.clock(),
            )  # fmt: skip

    return run_virtual(main()), turns


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_replay_keeps_arrivals_gaps_and_texts(scale: float) -> None:
    scripts = recorded(5)
    level, turns = _run(scripts, Load(scale=scale))
    starts = sorted(t - level.run.t0 for t in level.run.starts)
    assert starts == pytest.approx([2.0 * i / scale for i in range(5)], abs=1e-6)
    overheads = set()
    for s in scripts:
        mine = sorted((e for e in turns if e.session_id == s.session_id), key=lambda e: e.turn)
        assert [e.metrics.output_tokens for e in mine] == [12, 8, 20]
        for k in (1, 2):  # the recorded gap between a turn's end and the next turn's send
            gap = (mine[k].trace.sent_ns - mine[k - 1].trace.end_ns) * 1e-9
            assert gap == pytest.approx(s.turns[k].tool_s + s.turns[k].think_s, abs=1e-6)
        # Turn 1's prompt = turn 0's + its answer + the 40 synthetic tokens + the chat
        # template's few tokens around two messages (the same for every session).
        p0, p1 = (e.metrics.prompt_tokens or 0 for e in mine[:2])
        overheads.add(p1 - p0 - mine[0].metrics.output_tokens - 40)
        first = Tokenizer().count(s.turns[0].text or "")
        assert (mine[0].metrics.prompt_tokens or 0) > first
    assert len(overheads) == 1 and 0 < overheads.pop() < 16


def test_scripts_sweep_the_replay_speed() -> None:
    report = run_bench(
        BenchConfig(scripts=tuple(recorded(10)), sweep=Sweep(start=1, factor=4, max_levels=2),
                    duration_s=None),
        SimTarget(profile="cpu-tiny"),
    )  # fmt: skip
    assert [lvl["load"]["label"] for lvl in report["levels"]] == ["scale=1x", "scale=4x"]
    assert all(lvl["turns"] == 30 for lvl in report["levels"])
    assert report["run"]["workload"] == "scripts"


def test_scripts_and_rates_do_not_mix() -> None:
    with pytest.raises(ConfigError, match="own arrivals"):
        BenchConfig(scripts=tuple(recorded(2)), levels=(Load(rate=1.0),))
    w = Workload(name="w", templates=(SessionTemplate(name="t"),))
    with pytest.raises(ConfigError, match="needs scripts"):
        BenchConfig(workload=w, levels=(Load(scale=2.0),))
    with pytest.raises(ConfigError, match="exactly one"):
        Load(rate=1.0, scale=2.0)


@pytest.mark.parametrize("n", [0, -3])
def test_a_replay_limit_below_one_is_refused(n: int) -> None:
    """``max_sessions`` 0 or less used to replay one session without a word."""
    with pytest.raises(
        ConfigError, match=rf"max_sessions must be an int ≥ 1 or None \(no limit\), got {n}"
    ):
        replay_sessions(recorded(3), Load(scale=1.0), max_sessions=n)
    with pytest.raises(ConfigError, match="max_sessions"):
        BenchConfig(scripts=tuple(recorded(3)), levels=(Load(scale=1.0),), max_sessions=n)
