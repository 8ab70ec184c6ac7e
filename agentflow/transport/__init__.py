"""The wire: one streamed chat-completions request in, one :class:`~agentflow.TurnTrace` out.

Knows nothing of agents, sessions or fleets.

- :class:`HTTPTransport` — the default: asyncio.Protocol + httptools, all per-read work in
  the socket callback.
- :class:`AiohttpTransport` — the same on aiohttp (proxies, redirects, compression, an
  existing ``aiohttp.ClientSession``), at about twice the CPU per chunk.
- :class:`OpenAITransport` — through a user's ``openai.AsyncOpenAI`` client.
"""

from agentflow._public import publish as _publish
from agentflow.transport._aiohttp import AiohttpTransport
from agentflow.transport._decode import TraceBuilder, apportion
from agentflow.transport._http import HTTPTransport
from agentflow.transport._openai import OpenAITransport
from agentflow.transport._request import ChatRequest, Endpoint, Timeouts, parse_retry_after
from agentflow.transport._sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "AiohttpTransport",
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

# Exported classes report this namespace as their module (agentflow._public).
_publish(__name__, __all__, globals())
