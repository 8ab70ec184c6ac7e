"""``agentflow bench``: open-loop agentic load on the same Fleet, scheduler and metrics.

The data model (``docs/workloads.md``): a :class:`Workload` of :class:`SessionTemplate`
records with distributions (:class:`Constant`, :class:`Uniform`, :class:`LogNormal`,
:class:`Zipf`) samples into :class:`SessionScript` records — one concrete conversation
each (:class:`TurnScript` per turn) — which the runner executes as ordinary
:class:`~agentflow.Session` objects (:class:`BenchSession`) on a
:class:`~agentflow.Fleet`.

The runs (``docs/bench.md``): a :class:`Load` level (an arrival rate, or a number of
live sessions) gives a run's scripts (:func:`plan_sessions`); :func:`run_level` runs them
on a fleet and measures the window after the warm-up with
:class:`~agentflow.stats.FleetStats`; :func:`run_bench` runs a :class:`BenchConfig`'s
levels or :class:`Sweep` (with repeats and confidence intervals) against a target —
:class:`SimTarget` (the embedded simulator in virtual time) or :class:`HTTPTarget`.

    from agentflow.bench import BenchConfig, Load, SimTarget, get_workload, run_bench
    report = run_bench(BenchConfig(workload=get_workload("agentic"),
                                   levels=(Load(rate=2.0),), duration_s=120))
"""

from agentflow.bench._bench import (
    BENCH_SCHEMA_VERSION,
    BenchConfig,
    HTTPTarget,
    SimTarget,
    Sweep,
    Target,
    arun_bench,
    confidence_interval,
    run_bench,
)
from agentflow.bench._level import LevelResult, LevelTap, Saturation, run_level
from agentflow.bench._load import Arrival, Load, arrival_times, plan_sessions, replay_sessions
from agentflow.bench._session import BenchRun, BenchSession
from agentflow.bench._spec import (
    Constant,
    Dist,
    FanOut,
    LogNormal,
    SessionScript,
    SessionTemplate,
    TurnScript,
    Uniform,
    Workload,
    Zipf,
    load_workload,
    sample_value,
    synth_text,
)
from agentflow.bench._workloads import WORKLOADS, get_workload, workload_names

__all__ = [
    "BENCH_SCHEMA_VERSION",
    "WORKLOADS",
    "Arrival",
    "BenchConfig",
    "BenchRun",
    "BenchSession",
    "Constant",
    "Dist",
    "FanOut",
    "HTTPTarget",
    "LevelResult",
    "LevelTap",
    "Load",
    "LogNormal",
    "Saturation",
    "SessionScript",
    "SessionTemplate",
    "SimTarget",
    "Sweep",
    "Target",
    "TurnScript",
    "Uniform",
    "Workload",
    "Zipf",
    "arrival_times",
    "arun_bench",
    "confidence_interval",
    "get_workload",
    "load_workload",
    "plan_sessions",
    "replay_sessions",
    "run_bench",
    "run_level",
    "sample_value",
    "synth_text",
    "workload_names",
]
