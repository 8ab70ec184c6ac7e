"""A level run ``--repeats K`` times: its entry's every figure is the mean over the K runs
(it used to be so for the ten ``ci95`` figures only, and repeat 0's for the rest: TTFT p90
and mean, E2E, turns, tokens …), and its over-saturation reasons are those of the runs that
made the verdict. Virtual time on the simulator; nothing reads a wall clock."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from agentflow.bench import (
    BenchConfig,
    BenchRun,
    LevelResult,
    Load,
    SimTarget,
    get_workload,
    run_bench,
)
from agentflow.bench._level_entry import _level_entry
from agentflow.stats import FleetStats

LOAD = Load(rate=45.0)


@pytest.fixture(scope="module")
def level() -> dict[str, Any]:
    """One level of the ``short`` workload at 45 sessions/s, three times (cpu-tiny)."""
    config = BenchConfig(
        workload=get_workload("short"), levels=(LOAD,), duration_s=6.0, warmup_s=1.0, repeats=3
    )
    (entry,) = run_bench(config, SimTarget(profile="cpu-tiny"))["levels"]
    return entry  # type: ignore[no-any-return]


def _numbers(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every number (not a flag) in a summary, by its path."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, value


def _at(value: Any, path: str) -> Any:
    for part in path.replace("[", ".[").split(".")[1:]:
        value = value[int(part[1:-1])] if part.startswith("[") else value[part]
    return value


def test_every_figure_is_the_mean_over_the_repeats(level: dict[str, Any]) -> None:
    runs = level["repeats"]
    assert len(runs) == 3
    skip = {".load.value", ".requested_rate", ".window_s[0]", ".window_s[1]", ".seed_offset"}
    checked = 0
    for path, _ in _numbers(runs[0]):
        if path in skip or path.startswith((".saturation", ".report")):
            continue
        values = [v for r in runs if (v := _at(r, path)) is not None]
        assert _at(level, path) == pytest.approx(statistics.fmean(values)), path
        checked += 1
    assert checked > 40
    # Those that used to be repeat 0's, and differ between the repeats here:
    for path in (".ttft_s.p90", ".ttft_s.mean", ".e2e_s.p50", ".turns", ".output_tokens"):
        assert len({_at(r, path) for r in runs}) > 1, path
    sat = level["saturation"]
    for key in ("ttft_growth", "ttft_rise_s", "backlog", "backlog_growth"):
        assert sat[key] == pytest.approx(statistics.fmean(r["saturation"][key] for r in runs))


def _runs(level: dict[str, Any], verdicts: list[bool]) -> list[LevelResult]:
    """The level's three runs again, each marked over-saturated or not, for reason
    ``why-<repeat>``."""
    return [
        LevelResult(
            load=LOAD,
            summary={
                **{k: v for k, v in r.items() if k not in ("seed_offset", "report")},
                "saturation": {
                    **r["saturation"],
                    "saturated": sat,
                    "reasons": [f"why-{i}"] if sat else [],
                },
            },
            stats=FleetStats(),
            run=BenchRun(model="m", params={}, t0=0.0),
            report={},
        )
        for i, (r, sat) in enumerate(zip(level["repeats"], verdicts, strict=True))
    ]


@pytest.mark.parametrize(
    ("verdicts", "saturated", "reasons"),
    [
        ([True, False, False], False, []),  # repeat 0 alone was: no reason for a "no"
        ([False, True, True], True, ["repeat 1: why-1", "repeat 2: why-2"]),
        ([True, True, False], True, ["repeat 0: why-0", "repeat 1: why-1"]),
    ],
)
def test_the_reasons_are_those_of_the_runs_that_made_the_verdict(
    level: dict[str, Any], verdicts: list[bool], saturated: bool, reasons: list[str]
) -> None:
    """Over-saturated when most runs were; its reasons theirs. They were repeat 0's,
    whichever way the verdict went: reasons for a level not over-saturated, or none for
    one that was."""
    entry = _level_entry(LOAD, _runs(level, verdicts))
    assert entry["saturation"]["saturated"] is saturated
    assert entry["saturation"]["reasons"] == reasons
    assert [r["saturation"]["saturated"] for r in entry["repeats"]] == verdicts


def test_one_run_is_its_own_entry(level: dict[str, Any]) -> None:
    """Without repeats the entry is the run's summary, counts still ints."""
    run = _runs(level, [True, False, False])[0]
    entry = _level_entry(LOAD, [run])
    assert entry["turns"] == run.summary["turns"] and isinstance(entry["turns"], int)
    assert entry["saturation"]["reasons"] == ["why-0"]
