"""Fleet statistics: aggregation, goodput, and exports (JSON report, CSV, Prometheus).

Everything here consumes events (or a finished :class:`~agentflow.FleetResult`) and knows
nothing of the wire. The pieces, each a fleet callback::

    stats = FleetStats(slos=[SLO(ttft_s=2.0, tpot_s=0.010)])   # percentiles, goodput, …
    csv = TurnCSVWriter("turns.csv")                           # one row per turn, streamed
    prom = PrometheusExporter()                                # /metrics, opt-in
    result = await Fleet(transport, callbacks=[stats, csv, prom]).run(sessions)
    report = stats.report(run={"workload": "…"})               # agentflow.report/2 JSON

See ``docs/stats.md`` (what is computed, sketches and their error) and
``docs/report-schema.md`` (the report, field by field).
"""

from agentflow._public import publish as _publish
from agentflow.stats._agents import AgentStats
from agentflow.stats._fleet_stats import (
    DEFAULT_QUANTILES,
    DISTRIBUTIONS,
    FleetStats,
    ToolFigures,
)
from agentflow.stats._journal import JournalEntry, RunJournal
from agentflow.stats._prometheus import DEFAULT_BUCKETS, MetricsServer, PrometheusExporter
from agentflow.stats._report import (
    REPORT_SCHEMA_VERSION,
    build_report,
    exact_distribution,
    report_schema,
)
from agentflow.stats._rows import TurnRow, turn_row
from agentflow.stats._sketch import (
    DEFAULT_RELATIVE_ACCURACY,
    Sketch,
    nearest_rank,
    quantile_name,
)
from agentflow.stats._slo import SLO
from agentflow.stats._timeseries import TimeSeries
from agentflow.stats._turn_csv import TurnCSVWriter, read_turn_csv, write_turn_csv

__all__ = [
    "DEFAULT_BUCKETS",
    "DEFAULT_QUANTILES",
    "DEFAULT_RELATIVE_ACCURACY",
    "DISTRIBUTIONS",
    "REPORT_SCHEMA_VERSION",
    "SLO",
    "AgentStats",
    "FleetStats",
    "JournalEntry",
    "MetricsServer",
    "PrometheusExporter",
    "RunJournal",
    "Sketch",
    "TimeSeries",
    "ToolFigures",
    "TurnCSVWriter",
    "TurnRow",
    "build_report",
    "exact_distribution",
    "nearest_rank",
    "quantile_name",
    "read_turn_csv",
    "report_schema",
    "turn_row",
    "write_turn_csv",
]

# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
