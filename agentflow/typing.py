"""The signatures users implement or pass in: documented type aliases and Protocols.

Import them from here (``from agentflow.typing import Transport``). This module imports nothing
of the package at run time: the types it names are imported for type checking only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    from agentflow._events import Event
    from agentflow._request import ChatRequest
    from agentflow._trace import PromptInfo, TurnTrace

__all__ = [
    "Callback",
    "Clock",
    "Complete",
    "ContextLink",
    "ContextPolicy",
    "DeltaKind",
    "DeltaSink",
    "SessionContext",
    "Transport",
]

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


#: Runs one extra model request for a session, through the same admission, limits and
#: retries as its turns, and returns its trace (a compaction's summary call uses it).
Complete: TypeAlias = Callable[["ChatRequest"], Awaitable["TurnTrace"]]


class SessionContext(Protocol):
    """One session's view of a context link; made by :meth:`ContextLink.bind`."""

    async def before_turn(
        self,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        complete: Complete,
    ) -> PromptInfo | None:
        """Called before each model turn with the session's own message list.

        May rewrite ``messages`` in place (drop, truncate, compact) to keep the prompt in
        budget, and returns what it knows of the prompt about to be sent.

        Raises:
            ContextOverflow: the prompt cannot be brought inside the window.
        """

    def after_turn(self, turn: int, trace: TurnTrace) -> None:
        """Called after each model turn (the server's usage corrects local estimates)."""


class ContextLink(Protocol):
    """One link of an agent's context: ``Agent(context=link)`` or ``Agent(context=[…])``.

    A link is bound once per session; the chain runs its links' ``before_turn`` in order
    (each may rewrite the messages and say what it knows of the prompt) and their
    ``after_turn`` in reverse (see :class:`agentflow.context.ContextChain`).
    :class:`~agentflow.context.ContextBudget`, :class:`~agentflow.context.FleetBudget`
    and :class:`~agentflow.context.CacheBusterCheck` are the shipped links.
    """

    def bind(
        self,
        *,
        session_id: str,
        agent: str,
        emit: Callable[[Event], None],
        model: str,
        params: Mapping[str, Any],
    ) -> SessionContext:
        """A fresh per-session context; ``emit`` sends events to the fleet's callbacks.

        ``model`` and ``params`` are the agent's (``params["max_tokens"]`` sizes the
        output reserve)."""


#: The earlier name of :class:`ContextLink` (a context policy is a chain of one link);
#: code that implements it keeps working.
ContextPolicy = ContextLink
