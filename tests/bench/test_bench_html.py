"""The per-agent decode speed of a bench level on ``agentflow report``'s page: a level's
report keeps no ``agents`` rows, and the histogram and comparison bars read only those —
an empty panel saying no agent decoded, bars "—", while sessions did decode."""

from __future__ import annotations

import pytest

from agentflow.bench._bench import BenchConfig, SimTarget, run_bench
from agentflow.bench._load import Load
from agentflow.bench._workloads import WORKLOADS
from agentflow.report import _fig_latency
from agentflow.report._fig_compare import _agent_q
from agentflow.report._runs import Run, agent_decode_quantiles


def _level_runs() -> list[Run]:
    report = run_bench(
        BenchConfig(
            workload=WORKLOADS["short"],
            levels=(Load(rate=2.0), Load(rate=4.0)),
            duration_s=5.0,
            warmup_s=0.5,
        ),
        SimTarget(profile="cpu-tiny"),
    )
    return [Run(lvl["load"]["label"], lvl["repeats"][0]["report"]) for lvl in report["levels"]]


def test_a_level_keeps_the_quantiles_of_its_sessions_decode_speed() -> None:
    for run in _level_runs():
        assert run.report["agents"] == []  # still slim
        decode = run.report["per_agent"]["decode_tps"]
        assert decode["count"] > 0
        qs = agent_decode_quantiles(run)
        assert qs[0.0] == decode["min"] and qs[1.0] == decode["max"]
        assert qs[0.5] == decode["p50"] and qs[0.1] == decode["p10"]
        # The comparison bars: p10, p50, p90 of the sessions' decode speeds.
        assert [_agent_q(run, q) for q in (0.1, 0.5, 0.9)] == [
            decode["p10"],
            decode["p50"],
            decode["p90"],
        ]


def test_the_decode_histogram_draws_a_level(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    runs = _level_runs()
    notes: list[str] = []
    monkeypatch.setattr(_fig_latency, "empty_note", lambda ax, text: notes.append(text))
    figure = _fig_latency.decode_distribution(runs)
    assert notes == []  # not "no agent decoded two or more tokens"
    assert "drawn from the quantiles of per_agent.decode_tps" in figure.caption
    assert "rate=2/s, rate=4/s" in figure.caption


def test_values_from_quantiles_keep_them() -> None:
    values = _fig_latency._from_quantiles({0.0: 10.0, 0.5: 20.0, 1.0: 40.0}, 4)
    assert values == [12.5, 17.5, 25.0, 35.0]
