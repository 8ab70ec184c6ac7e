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
    SessionEndEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
)
from agentflow._fleet import Fleet, FleetResult
from agentflow._metrics import OutputTokenSource, TurnMetrics, turn_metrics
from agentflow._session import Session, SessionResult, SessionStatus, TurnRecord
from agentflow._tools import Tool, tool
from agentflow._trace import CacheSource, PromptInfo, ToolCall, TurnTrace, Usage
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
    "Clock",
    "Complete",
    "ConfigError",
    "ConnectError",
    "ContextOverflow",
    "ContextPolicy",
    "DeltaKind",
    "DeltaSink",
    "Endpoint",
    "ErrorEvent",
    "Event",
    "Fleet",
    "FleetEndEvent",
    "FleetResult",
    "HTTPTransport",
    "MaxTurnsExceeded",
    "OpenAITransport",
    "OutputTokenSource",
    "PromptInfo",
    "RateLimitError",
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
    "tool",
    "turn_metrics",
]
