"""The signatures users implement or pass in: documented type aliases and Protocols.

Everything here is re-exported from :mod:`agentflow`; import from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    from agentflow._events import Event
    from agentflow._trace import TurnTrace
    from agentflow.transport._request import ChatRequest

__all__ = ["Callback", "Clock", "DeltaKind", "DeltaSink", "Transport"]

#: What a streamed delta carried: answer text, reasoning text, or tool-call arguments.
DeltaKind: TypeAlias = Literal["content", "reasoning", "tool_call"]

#: A monotonic clock in integer nanoseconds (``time.perf_counter_ns`` by default).
#: Inject a fake one in tests so that nothing waits on, or flakes with, the wall clock.
Clock: TypeAlias = Callable[[], int]

#: A fleet callback: called with every :data:`~agentflow.Event`. May be sync or async.
#: Sync callbacks run inline on the stream's hot path (keep them cheap); async ones
#: run in order on one dispatcher task. A callback that raises is reported, never fatal.
Callback: TypeAlias = Callable[["Event"], None] | Callable[["Event"], Awaitable[None]]


class DeltaSink(Protocol):
    """Receives each output delta as it is parsed, on the hot path, synchronously."""

    def on_delta(self, kind: DeltaKind, text: str, t_ns: int) -> None:
        """One delta of ``kind`` carrying ``text`` arrived at ``t_ns``."""


class Transport(Protocol):
    """Sends one chat-completions request, streams it, and returns its trace.

    The seam between sessions and the wire: the aiohttp transport, the OpenAI SDK
    transport and the simulator's in-process transport all implement it.
    """

    @property
    def endpoint(self) -> str:
        """The base URL (or name) requests go to; never contains a secret."""

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        """Stream ``request`` to the end and return what arrived.

        Raises:
            TransportError: any failure on the wire, with the partial trace where one exists.
        """

    async def aclose(self) -> None:
        """Release connections. Safe to call twice."""
