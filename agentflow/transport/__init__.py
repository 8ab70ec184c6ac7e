"""The wire: one streamed chat-completions request in, one :class:`~agentflow.TurnTrace` out.

Knows nothing of agents, sessions or fleets.
"""

from agentflow.transport._decode import TraceBuilder, apportion
from agentflow.transport._http import HTTPTransport
from agentflow.transport._openai import OpenAITransport
from agentflow.transport._request import ChatRequest, Endpoint, Timeouts, parse_retry_after
from agentflow.transport._sse import SSEDecoder

__all__ = [
    "ChatRequest",
    "Endpoint",
    "HTTPTransport",
    "OpenAITransport",
    "SSEDecoder",
    "Timeouts",
    "TraceBuilder",
    "apportion",
    "parse_retry_after",
]
