"""``agentflow bench``: open-loop agentic load on the same Fleet, scheduler and metrics.

The data model (``docs/workloads.md``): a :class:`Workload` of :class:`SessionTemplate`
records with distributions (:class:`Constant`, :class:`Uniform`, :class:`LogNormal`,
:class:`Zipf`) samples into :class:`SessionScript` records — one concrete conversation
each (:class:`TurnScript` per turn) — which the runner executes as ordinary
:class:`~agentflow.Session` objects on a :class:`~agentflow.Fleet`.
"""

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

__all__ = [
    "Constant",
    "Dist",
    "FanOut",
    "LogNormal",
    "SessionScript",
    "SessionTemplate",
    "TurnScript",
    "Uniform",
    "Workload",
    "Zipf",
    "load_workload",
    "sample_value",
    "synth_text",
]
