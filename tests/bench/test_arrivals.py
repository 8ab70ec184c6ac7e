"""Open-loop arrivals: the achieved session rate is the requested one (within 2 %) over a
long virtual-time run, each session starts when its arrival says, whatever the server
does; and fixed-concurrency levels keep exactly N sessions alive."""

from __future__ import annotations

import asyncio
import itertools
import statistics
from typing import Any

import pytest

from agentflow import Fleet
from agentflow.bench import SessionTemplate, Workload, get_workload
from agentflow.bench._bench import BenchConfig, SimTarget, run_bench
from agentflow.bench._level import LevelResult, LevelTap, run_level
from agentflow.bench._load import Load, arrival_times, plan_sessions
from agentflow.bench._script import SessionScript, TurnScript
from agentflow.embedded import run_virtual
from agentflow.stats import SLO

TINY = Workload(
    name="tiny",
    templates=(SessionTemplate(name="req", turns=1, prompt_tokens=8, output_tokens=2),),
)


def _run(workload: Workload, load: Load, duration_s: float, seed: int = 0) -> LevelResult:
    scripts = plan_sessions(workload, load, duration_s=duration_s, seed=seed)
    return _level(
        scripts, load, duration_s, seed=seed, max_concurrency=100_000, prefix_warmup=False
    )


def _level(
    scripts: list[SessionScript],
    load: Load,
    duration_s: float,
    *,
    seed: int = 0,
    drain_s: float = 60.0,
    **fleet: Any,
) -> LevelResult:
    """One level of ``scripts`` on the simulator in virtual time (``fleet``: the
    ``Fleet``'s settings; ``drain_s``: the level's, ``run_level``'s default unless
    given)."""
    target = SimTarget(profile="cpu-tiny")

    async def main() -> LevelResult:
        tap = LevelTap()
        async with target.open(scripts, seed) as transport:
            fleet_ = Fleet(transport, callbacks=[tap], clock=target.clock(), **fleet)
            return await run_level(
                fleet_,
                tap,
                scripts,
                load=load,
                model="cpu-tiny",
                params={},
                duration_s=duration_s,
                clock=target.clock(),
                drain_s=drain_s,
            )

    return run_virtual(main())


@pytest.mark.parametrize("arrival", ["poisson", "constant"])
def test_achieved_rate_is_the_requested_rate(arrival: str) -> None:
    """40 sessions/s for 400 s of virtual time (~16,000 sessions): achieved within 2 %
    (Poisson: ±1 % is one standard deviation of the count; constant: exact)."""
    rate, duration = 40.0, 400.0
    level = _run(TINY, Load(rate=rate, arrival=arrival), duration)  # type: ignore[arg-type]
    s = level.summary
    assert s["sessions"]["not_started"] == 0
    assert s["sessions"]["started"] == s["sessions"]["planned"] > 15_000
    assert s["achieved_rate"] == pytest.approx(rate, rel=0.02)
    if arrival == "constant":
        assert s["sessions"]["started"] == rate * duration
    # Every session started at its arrival: the client never fell behind the schedule.
    starts = sorted(t - level.run.t0 for t in level.run.starts)
    scheduled = [t for t, _ in zip(arrival_times(rate, arrival, 0), starts, strict=False)]  # type: ignore[arg-type]
    assert max(abs(a - b) for a, b in zip(starts, scheduled, strict=True)) < 1e-6
    # Every session was served (the server kept up: 2 output tokens each).
    assert s["turns"] == s["sessions"]["started"]
    assert s["output_tps"] == pytest.approx(2 * rate, rel=0.03)
    if arrival == "poisson":  # exponential gaps: coefficient of variation ≈ 1
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
        assert cv == pytest.approx(1.0, abs=0.05)


def test_arrivals_do_not_wait_for_an_overloaded_server() -> None:
    """Open loop: at three times the server's capacity, sessions still arrive on schedule
    (the backlog grows on the server instead), and the level says it is over-saturated."""
    heavy = Workload(
        name="heavy",
        templates=(SessionTemplate(name="req", turns=1, prompt_tokens=64, output_tokens=100),),
    )
    level = _run(heavy, Load(rate=130.0, arrival="constant"), 10.0)
    s = level.summary
    assert s["achieved_rate"] == pytest.approx(130.0, rel=0.01)
    assert s["req_per_s"] < 50  # cpu-tiny serves ~43 requests/s of this size
    assert s["saturation"]["saturated"]
    assert s["saturation"]["backlog"] > 500


def test_fixed_concurrency_keeps_n_sessions_alive() -> None:
    """``Load(concurrency=N)``: never more than N sessions alive, N alive while the run
    lasts, the next one starting when one ends; none starts after the end."""
    workload = Workload(
        name="multi",
        templates=(
            SessionTemplate(
                name="agent", turns=3, prompt_tokens=16, output_tokens=20, tool_latency_s=0.5
            ),
        ),
    )
    level = _run(workload, Load(concurrency=6), 30.0)
    run = level.run
    # Alive sessions after everything that happened at one instant of virtual time.
    alive: dict[float, int] = {}
    n = 0
    for t, d in sorted([(t, 1) for t in run.starts] + [(t, -1) for t in run.ends]):
        n += d
        alive[t - run.t0] = n
    assert max(alive.values()) == 6
    # While the run lasts, each session that ends is replaced at once: always 6 alive.
    during = [n for t, n in alive.items() if t < 30.0]
    assert during and all(n == 6 for n in during)
    assert len(run.starts) > 60
    assert max(run.starts) - run.t0 < 30.0
    assert level.summary["sessions"]["not_started"] == level.summary["sessions"]["planned"] - len(
        run.starts
    )


def test_short_sessions_keep_a_concurrency_level_loaded_to_its_end() -> None:
    """``--concurrency 4 --duration 60`` with one-turn sessions of a few milliseconds:
    thousands of sessions, drawn as slots free up, keep 4 alive for the whole level (a
    fixed plan of 64 per slot ran out after ~15 s, and the sess/s figure divided those
    sessions by the whole window)."""
    report = run_bench(
        BenchConfig(
            workload=get_workload("short"),
            levels=(Load(concurrency=4),),
            duration_s=60.0,
            warmup_s=6.0,
        ),
        SimTarget(),
    )
    (lvl,) = report["levels"]
    sessions = lvl["sessions"]
    assert sessions["started"] == sessions["planned"] > 4 * 64
    assert sessions["ran_out_s"] is None and sessions["not_started"] == 0
    # Turns ran until the end of the window (54 s after its start)…
    assert lvl["repeats"][0]["report"]["fleet"]["duration_s"] == pytest.approx(54.0, abs=0.5)
    # … and one-turn sessions arrive as fast as requests are served.
    assert lvl["window_arrival_rate"] == pytest.approx(lvl["req_per_s"], rel=0.02)


def test_a_concurrency_level_that_runs_out_says_so() -> None:
    """With a session limit a concurrency level can run out before its end: the report
    says when, and its arrival rate is over the time it had sessions, not the window."""
    report = run_bench(
        BenchConfig(
            workload=get_workload("short"),
            levels=(Load(concurrency=4),),
            duration_s=60.0,
            warmup_s=1.0,
            max_sessions=200,
        ),
        SimTarget(),
    )
    (lvl,) = report["levels"]
    sessions = lvl["sessions"]
    assert sessions["started"] == sessions["planned"] == 200
    ran_out = sessions["ran_out_s"]
    assert ran_out is not None and 1.0 < ran_out < 60.0
    in_window = sessions["in_window"]
    assert lvl["window_arrival_rate"] == pytest.approx(in_window / (ran_out - 1.0), rel=0.02)


def test_level_end_stops_new_turns() -> None:
    """After the duration no new turn is sent; sessions in the middle of their script
    stop there (counted as cut) and in-flight turns finish."""
    workload = Workload(
        name="long",
        templates=(
            SessionTemplate(
                name="agent", turns=50, prompt_tokens=8, output_tokens=4, think_time_s=1.0
            ),
        ),
    )
    level = _run(workload, Load(rate=1.0, arrival="constant"), 10.0)
    s = level.summary
    assert s["sessions"]["started"] == 10
    assert s["sessions"]["cut_at_end"] == 10
    assert s["sessions"]["drained"]
    # Session k arrived at k s and sent a turn a second (think time 1 s + ~7 ms of turn).
    assert 0 < s["turns"] <= sum(range(1, 11))


def test_a_wait_past_the_end_ends_the_session_at_the_end() -> None:
    """A think time that would end after the level's end leads to no turn: the session
    sleeps until the end and is cut there, and the level ends with it — drained, not
    held open for the whole think time and cancelled as if turns were in flight."""
    scripts = [
        SessionScript(
            session_id=f"s{i}",
            arrival_s=float(i),
            turns=(
                TurnScript(tokens=50, max_tokens=20),
                TurnScript(tokens=50, max_tokens=20, think_s=300.0),
            ),
        )
        for i in range(5)
    ]
    level = _level(scripts, Load(scale=1.0), 10.0)
    s = level.summary
    assert s["sessions"]["drained"] and not s["saturation"]["saturated"]
    assert s["sessions"]["cut_at_end"] == 5 and s["turns"] == 5
    # Each session lived until the level's end (its slot was not freed early), no later.
    assert [t - level.run.t0 for t in level.run.ends] == [pytest.approx(10.0)] * 5


def test_the_fleets_own_limits_apply() -> None:
    """Bench sessions go through the fleet's scheduler: with max_concurrency=2 no more
    than 2 requests are ever in flight and the rest wait in its queue (queue_wait_s)."""
    longer = Workload(
        name="longer",
        templates=(SessionTemplate(name="req", turns=1, prompt_tokens=8, output_tokens=100),),
    )
    scripts = plan_sessions(longer, Load(rate=50.0, arrival="constant"), duration_s=4.0)
    s = _level(scripts, Load(rate=50.0), 4.0, max_concurrency=2).summary
    assert s["peak_in_flight"] == 2
    assert s["turns"] == 200 and s["sessions"]["drained"]
    # ~10 requests/s fit through 2 slots of ~0.1 s each: the other arrivals queue.
    assert s["queue_wait_s"]["p50"] > 1.0


def test_an_undrained_level_is_cancelled_and_over_saturated() -> None:
    """Turns still running ``drain_s`` after the end are cancelled; the level says so."""
    heavy = Workload(
        name="heavy",
        templates=(SessionTemplate(name="req", turns=1, prompt_tokens=64, output_tokens=100),),
    )
    load = Load(rate=200.0, arrival="constant")
    scripts = plan_sessions(heavy, load, duration_s=5.0)
    s = _level(scripts, load, 5.0, drain_s=1.0, max_concurrency=10_000).summary
    assert not s["sessions"]["drained"]
    assert s["saturation"]["saturated"]
    assert any("drain" in r for r in s["saturation"]["reasons"])
    assert s["turns"] < s["sessions"]["started"]  # the cancelled turns count nowhere
    assert s["peak_in_flight"] is None


def test_a_levels_rates_are_per_second_of_its_window() -> None:
    """One session every 20 s, the window [10 s, 60 s): two one-turn sessions in it, at
    20 s and 40 s. Each rate is over the window's 50 s — it was over the warm-up's end →
    the last turn's end (~30 s), which inflated the low end of a sweep by up to ~1.7×."""
    report = run_bench(
        BenchConfig(
            workload=TINY,
            levels=(Load(rate=0.05, arrival="constant"),),
            duration_s=60.0,
            warmup_s=10.0,
            slos=(SLO(ttft_s=10.0),),
        ),
        SimTarget(profile="cpu-tiny"),
    )
    (lvl,) = report["levels"]
    assert lvl["turns"] == 2 and lvl["output_tokens"] == 4
    assert lvl["req_per_s"] == pytest.approx(2 / 50)
    assert lvl["output_tps"] == pytest.approx(4 / 50)
    (good,) = lvl["goodput"]
    assert good["turn_fraction"] == 1.0
    assert good["turns_per_s"] == pytest.approx(2 / 50)
    assert good["output_tps"] == pytest.approx(4 / 50)
    assert lvl["repeats"][0]["report"]["fleet"]["duration_s"] == pytest.approx(50.0)


def test_a_cancelled_level_leaves_its_window_so_far_on_the_tap() -> None:
    """Cancelled 20.25 s into a 60 s level (Ctrl-C, SIGTERM, a caller's timeout): the
    fleet's sessions unwind, the cancellation goes on, and the tap holds the level measured
    up to the cancel — its window [10 s, 20.25 s), its rates over it, not over-saturated
    for the turns the cancel cut. It used to be lost: the bench wrote no report of a
    trace replay (one level) or of a sweep stopped in its first level."""
    load = Load(rate=2.0, arrival="constant")
    scripts = plan_sessions(TINY, load, duration_s=60.0)
    target = SimTarget(profile="cpu-tiny")
    tap = LevelTap()

    async def main() -> None:
        async with target.open(scripts, 0) as transport:
            fleet = Fleet(transport, callbacks=[tap], clock=target.clock())
            level = asyncio.ensure_future(
                run_level(
                    fleet,
                    tap,
                    scripts,
                    load=load,
                    model="cpu-tiny",
                    params={},
                    duration_s=60.0,
                    warmup_s=10.0,
                    clock=target.clock(),
                )
            )
            asyncio.get_running_loop().call_later(20.25, level.cancel)
            with pytest.raises(asyncio.CancelledError):
                await level

    run_virtual(main())
    assert tap.interrupted is not None
    s = tap.interrupted.summary
    assert s["interrupted"] and s["window_s"] == [10.0, 20.25]
    # One session every 0.5 s from 0: 41 started, 21 in the window, each served at once.
    assert s["sessions"]["started"] == 41 and s["turns"] == 21
    # The 79 planned after the cancel never started (it said 0).
    assert s["sessions"]["planned"] == 120 and s["sessions"]["not_started"] == 79
    assert s["req_per_s"] == pytest.approx(21 / 10.25)
    assert s["output_tps"] == pytest.approx(42 / 10.25)
    assert s["statuses"]["completed"] == 21
    assert not s["saturation"]["saturated"]
