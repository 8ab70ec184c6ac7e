"""A benchmark: load levels run one after another on one Fleet, each measured alone.

:func:`run_bench` takes a :class:`BenchConfig` (workload, levels or a sweep, duration,
warm-up, repeats, SLOs) and a target — :class:`SimTarget` (the embedded simulator in
virtual time, the default) or :class:`HTTPTarget` (any OpenAI-compatible server) —
and returns the bench report (``agentflow.bench/1``, ``docs/bench.md``): one entry per
level with its figures, their 95 % confidence intervals over the repeats, each
repeat's ``agentflow.report/2`` report, and the saturation knee. On real time each
repeat also runs a :class:`~agentflow.report.LoopLagProbe` on the client's own loop: its
report's ``run`` has ``loop_lag`` and ``reads_stamped_by``, and an over-saturated
level's reasons say when the client lagged.

A sweep goes from low load to high and stops once a level is over-saturated (its time
to first token or its backlog keeps growing, :class:`~agentflow.bench.Saturation`;
for fixed-concurrency levels, also when throughput stops growing while latency does), or
once a level's sessions all failed (``stopped: failed``).

This module is the run loop; what it runs is ``_bench_config`` (:class:`BenchConfig`,
:class:`Sweep`), where it runs ``_targets`` (:class:`Target`, :class:`SimTarget`,
:class:`HTTPTarget`), a level's entry over its repeats ``_level_entry`` and the report
``_bench_report``; every name is importable from here, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentflow._cli_signals import run_command
from agentflow._fleet import Fleet
from agentflow.bench._bench_config import BenchConfig, Sweep
from agentflow.bench._bench_report import BENCH_SCHEMA_VERSION, _report
from agentflow.bench._level import LevelResult, LevelTap, run_level
from agentflow.bench._level_entry import _CI_FIGURES as _CI_FIGURES
from agentflow.bench._level_entry import _T95 as _T95
from agentflow.bench._level_entry import _figure as _figure
from agentflow.bench._level_entry import (
    _level_entry,
    _plateau,
    confidence_interval,
    every_session_failed,
    note_lag,
)
from agentflow.bench._level_entry import _slim as _slim
from agentflow.bench._load import (
    Load,
    SessionStream,
    plan_sessions,
    replay_sessions,
    session_stream,
)
from agentflow.bench._script import SessionScript
from agentflow.bench._targets import HTTPTarget, SimTarget, Target
from agentflow.bench._targets import _longest_output as _longest_output

if TYPE_CHECKING:
    from agentflow.report._lag import LoopLagProbe

__all__ = [
    "BENCH_SCHEMA_VERSION",
    "BenchConfig",
    "HTTPTarget",
    "SimTarget",
    "Sweep",
    "Target",
    "confidence_interval",
    "run_bench",
]

# ---- the run -------------------------------------------------------------------------


def run_bench(
    config: BenchConfig,
    target: Target | None = None,
    *,
    on_level: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every level (on virtual time for a virtual target) and return the report.

    Args:
        config: what to run.
        target: where (default: :class:`SimTarget`).
        on_level: called with each level's entry as soon as it is measured — also with
            the entry of a level the run was interrupted in (Ctrl-C, SIGTERM: its
            ``interrupted`` is true; ``docs/bench.md``), before the interruption goes on.
    """
    chosen: Target = target if target is not None else SimTarget()
    if chosen.virtual:
        from agentflow.embedded import VirtualTimeLoop

        return run_command(
            arun_bench(config, chosen, on_level=on_level), loop_factory=VirtualTimeLoop
        )
    return run_command(arun_bench(config, chosen, on_level=on_level))


async def arun_bench(
    config: BenchConfig,
    target: Target,
    *,
    on_level: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """:func:`run_bench` on the running loop (a virtual target needs a VirtualTimeLoop)."""
    model = config.model or await target.model_name()
    params = _params(config)
    clock = target.clock()
    tap = LevelTap()
    levels: list[dict[str, Any]] = []
    over = 0
    stopped = "levels done"
    previous: dict[str, Any] | None = None
    for load in config.level_loads():
        runs: list[LevelResult] = []
        for r in range(config.repeats):
            seed = config.seed + r
            scripts = _scripts(config, load, seed)
            async with target.open(scripts, seed) as transport:
                info: dict[str, Any] = {"target": target.label, "model": model, "seed": seed}
                # The client's own loop, on real time (virtual time has no lag to see).
                lag = None if target.virtual else _probe()
                if lag is not None:
                    kernel = getattr(transport, "kernel_timestamps", False)
                    info["reads_stamped_by"] = "kernel" if kernel else "event loop"
                fleet = Fleet(
                    transport,
                    max_concurrency=config.max_in_flight,
                    max_tool_concurrency=config.max_in_flight,
                    callbacks=[tap, *config.callbacks],
                    clock=clock,
                    prefix_warmup=False,
                )
                try:
                    level = await run_level(
                        fleet,
                        tap,
                        scripts,
                        load=load,
                        model=model,
                        params=params,
                        duration_s=config.duration_s,
                        warmup_s=config.warmup_s,
                        drain_s=config.drain_s,
                        slos=config.slos,
                        clock=clock,
                        saturation=config.saturation,
                        run_info=info,
                        lag=lag,
                    )
                except asyncio.CancelledError:
                    # Ctrl-C, SIGTERM: the level's finished repeats, else the run cut
                    # short, go to on_level as an interrupted entry; the cancel goes on.
                    cut = tap.interrupted
                    measured = runs or ([cut] if cut is not None else [])
                    if on_level is not None and measured:
                        entry = _level_entry(load, measured)
                        entry["interrupted"] = True
                        on_level(entry)
                    raise
                runs.append(level)
        entry = _level_entry(load, runs)
        _plateau(config, entry, previous)
        note_lag(entry, [r.report for r in runs], load.label)
        levels.append(entry)
        if on_level is not None:
            on_level(entry)
        previous = entry
        if config.sweep is not None and every_session_failed(runs):
            stopped = "failed"  # higher loads would fail alike: the server serves none
            break
        if entry["saturation"]["saturated"]:
            over += 1
            if config.sweep is not None and over >= config.sweep.stop_after:
                stopped = "over-saturated"
                break
        else:
            over = 0
    return _report(config, target, model, params, levels, stopped)


def _probe() -> LoopLagProbe:
    from agentflow.report._lag import LoopLagProbe  # (not imported by a virtual bench)

    return LoopLagProbe()


def _params(config: BenchConfig) -> dict[str, Any]:
    """The body fields every request of the run carries."""
    params = dict(config.params)
    if config.workload is not None and config.workload.ignore_eos:
        params.setdefault("ignore_eos", True)
    return params


def partial_report(
    config: BenchConfig, target: Target, levels: list[dict[str, Any]], stopped: str
) -> dict[str, Any]:
    """The bench report of the levels measured before the run stopped early (their
    entries, as ``on_level`` got them — the last one maybe interrupted; at least one),
    ``stopped`` saying why (e.g. ``"interrupted"``)."""
    model = levels[0]["repeats"][0]["report"]["run"]["model"]
    return _report(config, target, model, _params(config), levels, stopped)


def _scripts(config: BenchConfig, load: Load, seed: int) -> list[SessionScript] | SessionStream:
    if config.scripts is not None:
        return replay_sessions(
            config.scripts, load, duration_s=config.duration_s, max_sessions=config.max_sessions
        )
    assert config.workload is not None
    # A fixed-concurrency level's are drawn as its sessions end: it never runs out.
    make = session_stream if load.concurrency is not None else plan_sessions
    return make(
        config.workload,
        load,
        duration_s=config.duration_s,
        max_sessions=config.max_sessions,
        seed=seed,
    )
