"""agentflow: run fleets of streaming, tool-calling LLM agents against OpenAI-compatible
servers, and measure every token.

The flow of one turn, and where each piece lives:
:class:`Agent` → :class:`Session` (turn loop) → :class:`Fleet` (admission, events)
→ a :class:`~agentflow.typing.Transport` (:class:`HTTPTransport` by default) →
a :class:`TurnTrace` → :class:`TurnMetrics` → :data:`Event` callbacks.
"""

from agentflow._agent import Agent
from agentflow._errors import (
    AgentflowError,
    APIStatusError,
    BadRequestError,
    BudgetExceeded,
    ConfigError,
    ConnectError,
    ContextOverflow,
    MaxTurnsExceeded,
    RateLimitError,
    ServerError,
    StreamInterrupted,
    StreamProtocolError,
    StreamTimeout,
    ToolError,
    TransportError,
)
from agentflow._events import (
    CallbackFailure,
    ErrorEvent,
    Event,
    FleetEndEvent,
    RetryEvent,
    SessionEndEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
)
from agentflow._fleet import Fleet, FleetResult, ReplicaStats
from agentflow._metrics import OutputTokenSource, TurnMetrics, turn_metrics
from agentflow._session import Session, SessionResult, SessionStatus, TurnRecord
from agentflow._tools import Tool, tool
from agentflow._trace import CacheSource, PromptInfo, ToolCall, TurnTrace, Usage
from agentflow.planner import (
    Deployment,
    GQAAttention,
    HardwareSpec,
    KVPlan,
    MLAAttention,
    ModelSpec,
)
from agentflow.planner import plan as plan_kv_cache
from agentflow.sched import (
    FCFS,
    PLAS,
    CircuitBreaker,
    Deadline,
    FailedAttempt,
    FairShare,
    Limits,
    Policy,
    Priority,
    Replica,
    RetryPolicy,
    Router,
)
from agentflow.transport import (
    AiohttpTransport,
    ChatRequest,
    Endpoint,
    HTTPTransport,
    OpenAITransport,
    Timeouts,
)
from agentflow.typing import (
    Callback,
    Clock,
    Complete,
    ContextPolicy,
    DeltaKind,
    DeltaSink,
    SessionContext,
    Transport,
)

__version__ = "0.1.0"

__all__ = [
    "FCFS",
    "PLAS",
    "APIStatusError",
    "Agent",
    "AgentflowError",
    "AiohttpTransport",
    "BadRequestError",
    "BudgetExceeded",
    "CacheSource",
    "Callback",
    "CallbackFailure",
    "ChatRequest",
    "CircuitBreaker",
    "Clock",
    "Complete",
    "ConfigError",
    "ConnectError",
    "ContextOverflow",
    "ContextPolicy",
    "Deadline",
    "DeltaKind",
    "DeltaSink",
    "Deployment",
    "Endpoint",
    "ErrorEvent",
    "Event",
    "FailedAttempt",
    "FairShare",
    "Fleet",
    "FleetEndEvent",
    "FleetResult",
    "GQAAttention",
    "HTTPTransport",
    "HardwareSpec",
    "KVPlan",
    "Limits",
    "MLAAttention",
    "MaxTurnsExceeded",
    "ModelSpec",
    "OpenAITransport",
    "OutputTokenSource",
    "Policy",
    "Priority",
    "PromptInfo",
    "RateLimitError",
    "Replica",
    "ReplicaStats",
    "RetryEvent",
    "RetryPolicy",
    "Router",
    "ServerError",
    "Session",
    "SessionContext",
    "SessionEndEvent",
    "SessionResult",
    "SessionStatus",
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
    "Transport",
    "TransportError",
    "TurnEndEvent",
    "TurnMetrics",
    "TurnRecord",
    "TurnTrace",
    "Usage",
    "__version__",
    "plan_kv_cache",
    "tool",
    "turn_metrics",
]
