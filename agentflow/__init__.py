"""agentflow: run fleets of streaming, tool-calling LLM agents against OpenAI-compatible
servers, and measure every token.

The flow of one turn, and where each piece lives:
:class:`Agent` → :class:`Session` (turn loop) → :class:`Fleet` (admission, events)
→ a :class:`~agentflow.typing.Transport` (:class:`HTTPTransport` by default) →
a :class:`TurnTrace` → :class:`TurnMetrics` → :data:`Event` callbacks.

This top level holds what running agents needs: agents, tools, sessions, the fleet and
its configuration (:class:`Limits`, :class:`Replica`, :class:`RetryPolicy`,
:class:`ContextBudget`, :class:`HTTPTransport`), the events and traces a run produces,
and every exception. The rest lives in its namespace: scheduling policies in
:mod:`agentflow.sched`, context policies and budgets in :mod:`agentflow.context`, other
transports in :mod:`agentflow.transport`, statistics and exporters in
:mod:`agentflow.stats`, the run store in :mod:`agentflow.store`, load generation in
:mod:`agentflow.bench`, the capacity planner in :mod:`agentflow.planner`, test doubles in
:mod:`agentflow.testing`, and the signatures you implement in :mod:`agentflow.typing`.

``import agentflow`` loads only the exceptions; the first use of any other name loads the
runtime (PEP 562 ``__getattr__``). Names that moved to a namespace still resolve here for
one release, with a :class:`DeprecationWarning` naming their new import path.
"""

import importlib as _importlib
import logging as _stdlib_logging
import typing as _typing
import warnings as _warnings

from agentflow._errors import (
    AgentflowError,
    AllReplicasDown,
    APIStatusError,
    BadRequestError,
    BudgetExceeded,
    ConfigError,
    ConnectError,
    ContextLengthExceeded,
    ContextOverflow,
    LeaseLost,
    MaxTurnsExceeded,
    RateLimitError,
    RecordsLeftOut,
    RunNotFound,
    ServerError,
    ServerStartError,
    StoreBacklogFull,
    StoreError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
    ToolError,
    ToolTimeout,
    TransportError,
    UnexpectedContentType,
    WorkerError,
)
from agentflow._public import publish as _publish
from agentflow._version import __version__

# A library's loggers get a NullHandler, here where every import of agentflow passes
# (modules log through structlog's wrappers or ``logging.getLogger`` alike): with no
# handler anywhere, logging's last resort would print agentflow's warnings and errors to
# stderr although the application asked for nothing. (Once: a reload adds no second.)
_root_logger = _stdlib_logging.getLogger("agentflow")
if not any(type(h) is _stdlib_logging.NullHandler for h in _root_logger.handlers):
    _root_logger.addHandler(_stdlib_logging.NullHandler())
del _root_logger

if _typing.TYPE_CHECKING:
    from agentflow._agent import (
        MAX_PRIORITY,
        Agent,
    )
    from agentflow._event_bus import (
        CallbackFailure,
    )
    from agentflow._events import (
        AttemptDiscardedEvent,
        ErrorEvent,
        Event,
        FleetEndEvent,
        FleetStartEvent,
        RetryEvent,
        SessionEndEvent,
        TokenEvent,
        ToolCallEvent,
        ToolResultEvent,
        TurnEndEvent,
    )
    from agentflow._fleet import (
        Fleet,
        FleetResult,
        ReplicaStats,
    )
    from agentflow._metrics import (
        OutputTokenSource,
        TurnMetrics,
        turn_metrics,
    )
    from agentflow._redact import (
        redact,
        register_secret,
    )
    from agentflow._session import (
        Session,
        SessionResult,
        SessionStatus,
        TurnLog,
        TurnRecord,
    )
    from agentflow._tools import (
        DEFAULT_TOOL_TIMEOUT_S,
        Tool,
        tool,
    )
    from agentflow._trace import (
        CacheSource,
        PromptInfo,
        ToolCall,
        TurnTrace,
        Usage,
    )
    from agentflow.context import (
        ContextBudget,
    )
    from agentflow.sched import (
        Limits,
        Replica,
        RetryPolicy,
    )
    from agentflow.transport import (
        Endpoint,
        HTTPTransport,
        Timeouts,
    )

__all__ = [
    "DEFAULT_TOOL_TIMEOUT_S",
    "MAX_PRIORITY",
    "APIStatusError",
    "Agent",
    "AgentflowError",
    "AllReplicasDown",
    "AttemptDiscardedEvent",
    "BadRequestError",
    "BudgetExceeded",
    "CacheSource",
    "CallbackFailure",
    "ConfigError",
    "ConnectError",
    "ContextBudget",
    "ContextLengthExceeded",
    "ContextOverflow",
    "Endpoint",
    "ErrorEvent",
    "Event",
    "Fleet",
    "FleetEndEvent",
    "FleetResult",
    "FleetStartEvent",
    "HTTPTransport",
    "LeaseLost",
    "Limits",
    "MaxTurnsExceeded",
    "OutputTokenSource",
    "PromptInfo",
    "RateLimitError",
    "RecordsLeftOut",
    "Replica",
    "ReplicaStats",
    "RetryEvent",
    "RetryPolicy",
    "RunNotFound",
    "ServerError",
    "ServerStartError",
    "Session",
    "SessionEndEvent",
    "SessionResult",
    "SessionStatus",
    "StoreBacklogFull",
    "StoreError",
    "StreamInterrupted",
    "StreamProtocolError",
    "StreamTimeout",
    "Timeouts",
    "TokenEvent",
    "Tool",
    "ToolCall",
    "ToolCallEvent",
    "ToolError",
    "ToolResultEvent",
    "ToolTimeout",
    "TransportError",
    "TurnEndEvent",
    "TurnLog",
    "TurnMetrics",
    "TurnRecord",
    "TurnTrace",
    "UnexpectedContentType",
    "Usage",
    "WorkerError",
    "__version__",
    "redact",
    "register_secret",
    "tool",
    "turn_metrics",
]

# Every top-level name not defined above, and the module that defines it. The first use
# of any of them imports all these modules at once (they import one another anyway).
_LAZY: dict[str, str] = {
    "Agent": "agentflow._agent",
    "AttemptDiscardedEvent": "agentflow._events",
    "CacheSource": "agentflow._trace",
    "CallbackFailure": "agentflow._event_bus",
    "ContextBudget": "agentflow.context",
    "DEFAULT_TOOL_TIMEOUT_S": "agentflow._tools",
    "Endpoint": "agentflow.transport",
    "ErrorEvent": "agentflow._events",
    "Event": "agentflow._events",
    "Fleet": "agentflow._fleet",
    "FleetEndEvent": "agentflow._events",
    "FleetResult": "agentflow._fleet",
    "FleetStartEvent": "agentflow._events",
    "HTTPTransport": "agentflow.transport",
    "Limits": "agentflow.sched",
    "MAX_PRIORITY": "agentflow._agent",
    "OutputTokenSource": "agentflow._metrics",
    "PromptInfo": "agentflow._trace",
    "Replica": "agentflow.sched",
    "ReplicaStats": "agentflow._fleet",
    "RetryEvent": "agentflow._events",
    "RetryPolicy": "agentflow.sched",
    "Session": "agentflow._session",
    "SessionEndEvent": "agentflow._events",
    "SessionResult": "agentflow._session",
    "SessionStatus": "agentflow._session",
    "Timeouts": "agentflow.transport",
    "TokenEvent": "agentflow._events",
    "Tool": "agentflow._tools",
    "ToolCall": "agentflow._trace",
    "ToolCallEvent": "agentflow._events",
    "ToolResultEvent": "agentflow._events",
    "TurnEndEvent": "agentflow._events",
    "TurnLog": "agentflow._session",
    "TurnMetrics": "agentflow._metrics",
    "TurnRecord": "agentflow._session",
    "TurnTrace": "agentflow._trace",
    "Usage": "agentflow._trace",
    "redact": "agentflow._redact",
    "register_secret": "agentflow._redact",
    "tool": "agentflow._tools",
    "turn_metrics": "agentflow._metrics",
}

# Names that were top-level until 0.1 and now live in a namespace: (module, name there).
# They resolve for one more release, with a DeprecationWarning.
_MOVED: dict[str, tuple[str, str]] = {
    "AiohttpTransport": ("agentflow.transport", "AiohttpTransport"),
    "BenchConfig": ("agentflow.bench", "BenchConfig"),
    "BudgetEvent": ("agentflow.context", "BudgetEvent"),
    "CacheBusterCheck": ("agentflow.context", "CacheBusterCheck"),
    "CacheBusterWarning": ("agentflow.context", "CacheBusterWarning"),
    "Calibrator": ("agentflow.context", "Calibrator"),
    "Callback": ("agentflow.typing", "Callback"),
    "ChatRequest": ("agentflow.transport", "ChatRequest"),
    "CircuitBreaker": ("agentflow.sched", "CircuitBreaker"),
    "Clock": ("agentflow.typing", "Clock"),
    "Compact": ("agentflow.context", "Compact"),
    "CompactionEvent": ("agentflow.context", "CompactionEvent"),
    "Complete": ("agentflow.typing", "Complete"),
    "ContextPolicy": ("agentflow.typing", "ContextPolicy"),
    "ContextTrimmedEvent": ("agentflow.context", "ContextTrimmedEvent"),
    "Deadline": ("agentflow.sched", "Deadline"),
    "DeltaKind": ("agentflow.typing", "DeltaKind"),
    "DeltaSink": ("agentflow.typing", "DeltaSink"),
    "Deployment": ("agentflow.planner", "Deployment"),
    "DropOldest": ("agentflow.context", "DropOldest"),
    "FCFS": ("agentflow.sched", "FCFS"),
    "Fail": ("agentflow.context", "Fail"),
    "FailedAttempt": ("agentflow.sched", "FailedAttempt"),
    "FairShare": ("agentflow.sched", "FairShare"),
    "FleetBudget": ("agentflow.context", "FleetBudget"),
    "FleetStats": ("agentflow.stats", "FleetStats"),
    "GQAAttention": ("agentflow.planner", "GQAAttention"),
    "HardwareSpec": ("agentflow.planner", "HardwareSpec"),
    "KVPlan": ("agentflow.planner", "KVPlan"),
    "Load": ("agentflow.bench", "Load"),
    "MLAAttention": ("agentflow.planner", "MLAAttention"),
    "MessageCounter": ("agentflow.context", "MessageCounter"),
    "ModelSpec": ("agentflow.planner", "ModelSpec"),
    "OpenAITransport": ("agentflow.transport", "OpenAITransport"),
    "OverflowPolicy": ("agentflow.context", "OverflowPolicy"),
    "OverflowView": ("agentflow.context", "OverflowView"),
    "PLAS": ("agentflow.sched", "PLAS"),
    "Policy": ("agentflow.sched", "Policy"),
    "PostgresStore": ("agentflow.store", "PostgresStore"),
    "PrefixIndex": ("agentflow.context", "PrefixIndex"),
    "Prices": ("agentflow.context", "Prices"),
    "Priority": ("agentflow.sched", "Priority"),
    "PrometheusExporter": ("agentflow.stats", "PrometheusExporter"),
    "Router": ("agentflow.sched", "Router"),
    "SLO": ("agentflow.stats", "SLO"),
    "SQLiteStore": ("agentflow.store", "SQLiteStore"),
    "SessionContext": ("agentflow.typing", "SessionContext"),
    "SessionScript": ("agentflow.bench", "SessionScript"),
    "SessionTemplate": ("agentflow.bench", "SessionTemplate"),
    "Store": ("agentflow.store", "Store"),
    "Sweep": ("agentflow.bench", "Sweep"),
    "TiktokenCounter": ("agentflow.context", "TiktokenCounter"),
    "TraceRecord": ("agentflow.bench", "TraceRecord"),
    "TraceRecorder": ("agentflow.bench", "TraceRecorder"),
    "Transport": ("agentflow.typing", "Transport"),
    "TruncateToolOutputs": ("agentflow.context", "TruncateToolOutputs"),
    "TurnCSVWriter": ("agentflow.stats", "TurnCSVWriter"),
    "TurnRow": ("agentflow.stats", "TurnRow"),
    "TurnScript": ("agentflow.bench", "TurnScript"),
    "Workload": ("agentflow.bench", "Workload"),
    "plan_kv_cache": ("agentflow.planner", "plan"),
    "prefix_reuse": ("agentflow.context", "prefix_reuse"),
    "read_turn_csv": ("agentflow.stats", "read_turn_csv"),
    "run_bench": ("agentflow.bench", "run_bench"),
}


def _load() -> None:
    """Import the runtime and bind every lazy name here, with ``__module__`` public."""
    namespace = globals()
    for name, module in _LAZY.items():
        namespace[name] = getattr(_importlib.import_module(module), name)
    typing_names = vars(_importlib.import_module("agentflow.typing"))
    sched_names = vars(_importlib.import_module("agentflow.sched"))
    _publish(__name__, _LAZY, {**typing_names, **sched_names, **namespace})


if _typing.TYPE_CHECKING:
    # The moved names, for type checkers: their real types (the ``__getattr__`` below is
    # hidden from checkers, so that a misspelled name is an error, not ``Any``).
    from agentflow.bench import BenchConfig as BenchConfig
    from agentflow.bench import Load as Load
    from agentflow.bench import SessionScript as SessionScript
    from agentflow.bench import SessionTemplate as SessionTemplate
    from agentflow.bench import Sweep as Sweep
    from agentflow.bench import TraceRecord as TraceRecord
    from agentflow.bench import TraceRecorder as TraceRecorder
    from agentflow.bench import TurnScript as TurnScript
    from agentflow.bench import Workload as Workload
    from agentflow.bench import run_bench as run_bench
    from agentflow.context import BudgetEvent as BudgetEvent
    from agentflow.context import CacheBusterCheck as CacheBusterCheck
    from agentflow.context import CacheBusterWarning as CacheBusterWarning
    from agentflow.context import Calibrator as Calibrator
    from agentflow.context import Compact as Compact
    from agentflow.context import CompactionEvent as CompactionEvent
    from agentflow.context import ContextTrimmedEvent as ContextTrimmedEvent
    from agentflow.context import DropOldest as DropOldest
    from agentflow.context import Fail as Fail
    from agentflow.context import FleetBudget as FleetBudget
    from agentflow.context import MessageCounter as MessageCounter
    from agentflow.context import OverflowPolicy as OverflowPolicy
    from agentflow.context import OverflowView as OverflowView
    from agentflow.context import PrefixIndex as PrefixIndex
    from agentflow.context import Prices as Prices
    from agentflow.context import TiktokenCounter as TiktokenCounter
    from agentflow.context import TruncateToolOutputs as TruncateToolOutputs
    from agentflow.context import prefix_reuse as prefix_reuse
    from agentflow.planner import Deployment as Deployment
    from agentflow.planner import GQAAttention as GQAAttention
    from agentflow.planner import HardwareSpec as HardwareSpec
    from agentflow.planner import KVPlan as KVPlan
    from agentflow.planner import MLAAttention as MLAAttention
    from agentflow.planner import ModelSpec as ModelSpec
    from agentflow.planner import plan as _plan
    from agentflow.sched import FCFS as FCFS
    from agentflow.sched import PLAS as PLAS
    from agentflow.sched import CircuitBreaker as CircuitBreaker
    from agentflow.sched import Deadline as Deadline
    from agentflow.sched import FailedAttempt as FailedAttempt
    from agentflow.sched import FairShare as FairShare
    from agentflow.sched import Policy as Policy
    from agentflow.sched import Priority as Priority
    from agentflow.sched import Router as Router
    from agentflow.stats import SLO as SLO
    from agentflow.stats import FleetStats as FleetStats
    from agentflow.stats import PrometheusExporter as PrometheusExporter
    from agentflow.stats import TurnCSVWriter as TurnCSVWriter
    from agentflow.stats import TurnRow as TurnRow
    from agentflow.stats import read_turn_csv as read_turn_csv
    from agentflow.store import PostgresStore as PostgresStore
    from agentflow.store import SQLiteStore as SQLiteStore
    from agentflow.store import Store as Store
    from agentflow.transport import AiohttpTransport as AiohttpTransport
    from agentflow.transport import ChatRequest as ChatRequest
    from agentflow.transport import OpenAITransport as OpenAITransport
    from agentflow.typing import Callback as Callback
    from agentflow.typing import Clock as Clock
    from agentflow.typing import Complete as Complete
    from agentflow.typing import ContextPolicy as ContextPolicy
    from agentflow.typing import DeltaKind as DeltaKind
    from agentflow.typing import DeltaSink as DeltaSink
    from agentflow.typing import SessionContext as SessionContext
    from agentflow.typing import Transport as Transport

    plan_kv_cache = _plan  # (a renamed import is no re-export to mypy; an assignment is)

if not _typing.TYPE_CHECKING:
    # PEP 562, at run time only: checkers read the names declared above, so that
    # ``from agentflow import Fleeet`` is an error under ``mypy --strict``, not ``Any``.

    def __getattr__(name: str) -> _typing.Any:
        if name in _LAZY:
            _load()
            return globals()[name]
        if name in _MOVED:
            module, new = _MOVED[name]
            path = f"from {module} import {new}"
            _warnings.warn(
                f"agentflow.{name} is deprecated and will be removed in the next release; "
                f"use {path}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(_importlib.import_module(module), new)
        raise AttributeError(f"module 'agentflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


_publish(__name__, __all__, globals())
