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

Trace replay (``docs/traces.md``): a JSONL trace of requests (:class:`TraceRecord`,
:func:`read_trace`, :func:`write_trace`; Mooncake's format via :func:`read_mooncake`)
becomes scripts (:func:`trace_scripts`) that ``BenchConfig(scripts=…)`` replays; any
run records to that format (:class:`TraceRecorder`, :func:`record_result`,
:func:`record_store`).
"""

from agentflow._public import publish as _publish
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
from agentflow.bench._mooncake import MOONCAKE_BLOCK_TOKENS, MooncakeRecord, read_mooncake
from agentflow.bench._record import TraceRecorder, record_result, record_store
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
from agentflow.bench._trace import trace_scripts
from agentflow.bench._trace_format import (
    SHIPPED_TRACES,
    TRACE_FORMATS,
    TraceMessage,
    TraceRecord,
    load_trace,
    read_trace,
    shipped_trace,
    write_trace,
)
from agentflow.bench._workloads import WORKLOADS, get_workload, workload_names

__all__ = [
    "BENCH_SCHEMA_VERSION",
    "MOONCAKE_BLOCK_TOKENS",
    "SHIPPED_TRACES",
    "TRACE_FORMATS",
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
    "MooncakeRecord",
    "Saturation",
    "SessionScript",
    "SessionTemplate",
    "SimTarget",
    "Sweep",
    "Target",
    "TraceMessage",
    "TraceRecord",
    "TraceRecorder",
    "TurnScript",
    "Uniform",
    "Workload",
    "Zipf",
    "arrival_times",
    "arun_bench",
    "confidence_interval",
    "get_workload",
    "load_trace",
    "load_workload",
    "plan_sessions",
    "read_mooncake",
    "read_trace",
    "record_result",
    "record_store",
    "replay_sessions",
    "run_bench",
    "run_level",
    "sample_value",
    "shipped_trace",
    "synth_text",
    "trace_scripts",
    "workload_names",
    "write_trace",
]

# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
