"""The bench spec, the bench runner, FleetStats, the live view, the run figures and trace
replay were split into modules of one idea each: every name still imports from its old
module (as the same object), and sampled scripts still encode without their zero waits
(msgspec's ``omit_defaults`` compares by identity, so the samplers must hand out the
records' own default object, ``_script._NO_WAIT``)."""

from __future__ import annotations

import importlib

import msgspec
import pytest

from agentflow.bench import FanOut, SessionTemplate, Workload

# What each old module defined before the split (public and private).
OLD_NAMES = {
    "agentflow.bench._spec": (
        "Constant Dist FanOut LogNormal SessionScript SessionTemplate TurnScript Uniform "
        "Workload Zipf load_workload sample_value synth_text scripts_output_tokens _WORDS "
        "_bounds _check_dist _clip _finite _joined_prefix _prefix_text _sample_int _sample_s "
        "_system_prompt _zipf_cdf"
    ),
    "agentflow.bench._bench": (
        "BENCH_SCHEMA_VERSION BenchConfig HTTPTarget SimTarget Sweep Target confidence_interval "
        "run_bench arun_bench _CI_FIGURES _T95 _figure _level_entry _longest_output "
        "_plateau _report _scripts _slim"
    ),
    "agentflow.stats._fleet_stats": (
        "DEFAULT_QUANTILES DISTRIBUTIONS SERIES FleetStats ToolFigures _STATUSES _error_text"
    ),
    "agentflow.report._live": (
        "LiveView BAR_WIDTH RATE_WINDOW_S ROLLING_TURNS ROLLING_WINDOW_S _ROW _Row _bar_line "
        "_log _ms _ms_fine _rank _tps"
    ),
    "agentflow.report._fig_run": (
        "errors_retries lengths session_timeline tool_durations FLOOR_S MODEL_COLOR QUEUE_COLOR "
        "TOOLS_COLOR _LENGTHS _edges _num _sample_values _samples _short _spans _tools"
    ),
    "agentflow.bench._trace": (
        "SHIPPED_TRACES TRACE_FORMATS TraceMessage TraceRecord TraceSource blocks_text "
        "load_trace read_trace shipped_trace trace_scripts write_trace DEFAULT_BLOCK_TOKENS "
        "DEFAULT_OUTPUT_TOKENS _BOUNDED _NONNEG_FLOATS _NONNEG_INTS _POS_INTS _TRACES _check "
        "_lines _ordered _read_lines _system"
    ),
}

# Their __all__ before the split.
OLD_ALL = {
    "agentflow.bench._spec": OLD_NAMES["agentflow.bench._spec"].split()[:13],
    "agentflow.bench._bench": OLD_NAMES["agentflow.bench._bench"].split()[:8],
    "agentflow.stats._fleet_stats": [
        "DEFAULT_QUANTILES",
        "DISTRIBUTIONS",
        "FleetStats",
        "ToolFigures",
    ],
    "agentflow.report._live": ["LiveView"],
    "agentflow.report._fig_run": OLD_NAMES["agentflow.report._fig_run"].split()[:4],
    "agentflow.bench._trace": OLD_NAMES["agentflow.bench._trace"].split()[:11],
}


@pytest.mark.parametrize("module", sorted(OLD_NAMES))
def test_every_name_still_imports_from_its_old_module(module: str) -> None:
    old = importlib.import_module(module)
    public = importlib.import_module(module.rsplit(".", 1)[0])
    for name in OLD_NAMES[module].split():
        value = getattr(old, name)
        if name in public.__all__:
            assert value is getattr(public, name), name
    assert sorted(old.__all__) == sorted(OLD_ALL[module])


def _workload(tool_latency_s: float) -> Workload:
    return Workload(
        name="w",
        templates=(
            SessionTemplate(
                name="parent",
                turns=3,
                tool_latency_s=tool_latency_s,
                fanout=FanOut(template="sub", width=2),
            ),
            SessionTemplate(name="sub", weight=0, turns=2),
        ),
    )


def test_sampled_scripts_leave_their_zero_waits_out_when_encoded() -> None:
    script = _workload(0.0).sample(0, seed=1)
    data = msgspec.to_builtins(script)
    assert "arrival_s" not in data  # sample()'s default arrival
    first, second, third = data["turns"]
    assert not {"tool_s", "think_s"} & first.keys()  # turn 0: no tool, no think time
    # later turns: a tool latency of 0 and the default think time are left out too
    assert "tool_s" not in second and "think_s" not in second and "think_s" not in third
    subagents = second["subagents"]  # forked after turn 0, rejoining in turn 1
    assert len(subagents) == 2 and all("arrival_s" not in s for s in subagents)
    assert msgspec.json.decode(msgspec.json.encode(script), type=type(script)) == script


def test_sampled_waits_that_are_not_zero_are_encoded() -> None:
    data = msgspec.to_builtins(_workload(1.5).sample(0, seed=1, arrival_s=2.0))
    assert data["arrival_s"] == 2.0
    assert [t.get("tool_s") for t in data["turns"]] == [None, 1.5, 1.5]
