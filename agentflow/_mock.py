"""In-process test doubles: :class:`MockTransport` and :func:`capture_events`.

Re-exported from :mod:`agentflow.testing`; import them from there.

:class:`MockTransport` answers each request with the :class:`~agentflow.testing.Reply`
its handler returns, without a socket. The reply's SSE frames go through the same read
loop as the HTTP transports' (:class:`~agentflow.transport._stream.StreamState`: the
SSE decoder and the trace builder), and its error statuses through the same
``status_error``, so a test sees the traces, metrics,
token events and exceptions a real server would produce — only the network is missing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from multidict import CIMultiDict

from agentflow._errors import ConfigError, ConnectError, StreamInterrupted
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
from agentflow._seconds import MAX_TIMEOUT_S, check_seconds
from agentflow._session_checks import check_headers
from agentflow._trace import TurnTrace
from agentflow.transport._request import ChatRequest
from agentflow.transport._shared import (
    content_type_error,
    keep_headers,
    refused_content_type,
    status_error,
)
from agentflow.transport._stream import StreamState
from agentflow.typing import Clock, DeltaSink

if TYPE_CHECKING:
    from agentflow._context_events import (
        BudgetEvent,
        CacheBusterWarning,
        CompactionEvent,
        ContextTrimmedEvent,
    )
    from agentflow._reply import Reply

__all__ = ["EventCapture", "Handler", "MockTransport", "capture_events"]

#: What :class:`MockTransport` calls for each request: takes the request, returns the
#: :class:`~agentflow.testing.Reply` to answer with (or an awaitable of one).
Handler = Callable[[ChatRequest], "Reply | Awaitable[Reply]"]


class MockTransport:
    """A :class:`~agentflow.typing.Transport` that answers in-process, from a handler.

    Like ``httpx.MockTransport``: ``handler(request)`` gets each
    :class:`~agentflow.transport.ChatRequest` and returns a :class:`~agentflow.testing.Reply`
    (``Reply.text``, ``Reply.tool_call``, ``Reply.stream``, ``Reply.error``, or one
    with raw ``frames``). The reply is decoded exactly as a server's bytes are: frame
    by frame through the SSE decoder and the trace builder, a non-2xx status through
    the HTTP transports' error mapping (a 429 is a :class:`~agentflow.RateLimitError`
    with its ``Retry-After``, a 5xx a :class:`~agentflow.ServerError`, a "too long" 400 a
    :class:`~agentflow.ContextLengthExceeded`); ``drop=True`` is a
    :class:`~agentflow.ConnectError` (as a stale kept-alive connection's drop is; over
    real HTTP a *new* connection dropped after carrying the request is a
    :class:`~agentflow.StreamInterrupted`: the server may have read it) and ``cut=True`` a
    :class:`~agentflow.StreamInterrupted` with the partial trace. ``frame_delay_s``
    sleeps on the event loop between frames (virtual time under ``VirtualTimeLoop``).

    No time limits apply: the handler decides how long a reply takes.

    Args:
        handler: called once per request, in the order requests arrive.
        clock: nanosecond clock for the traces' timestamps.
        endpoint: the label traces and errors carry.

    Attributes:
        requests: every request received, in order, with its messages as they were
            when it was sent (the handler gets the same copy).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        clock: Clock = time.perf_counter_ns,
        endpoint: str = "mock://agentflow",
    ) -> None:
        if not callable(handler):
            raise ConfigError(f"MockTransport.handler must be callable, got {handler!r}")
        self._handler = handler
        self._clock = clock
        self._endpoint = endpoint
        self.requests: list[ChatRequest] = []

    @classmethod
    def scripted(cls, replies: Iterable[Reply], **kw: Any) -> MockTransport:
        """A transport that answers with ``replies`` in order (as
        :class:`~agentflow.testing.ScriptedServer` does); a request past the end is
        answered with a 400, not retried (``script exhausted: request N has no reply``), so
        the session fails at once. :meth:`assert_complete` checks every reply was used."""
        return cls(_Script(replies), **kw)

    def assert_complete(self) -> None:
        """Fail unless every scripted reply was requested (for :meth:`scripted`)."""
        left = self._handler.left if isinstance(self._handler, _Script) else 0
        if left:
            raise AssertionError(f"{left} scripted replies were never requested")

    @property
    def endpoint(self) -> str:
        """The label given as ``endpoint`` (``mock://agentflow`` by default)."""
        return self._endpoint

    async def stream(self, request: ChatRequest, sink: DeltaSink | None = None) -> TurnTrace:
        """Answer ``request`` with the handler's reply; see :class:`~agentflow.typing.Transport`."""
        clock = self._clock
        # What the wire would carry: the session goes on appending to its message list.
        request = dataclasses.replace(request, messages=[dict(m) for m in request.messages])
        self.requests.append(request)
        st = StreamState(self._endpoint, clock, sink)  # sent now
        reply = self._handler(request)
        if inspect.isawaitable(reply):
            reply = await reply
        from agentflow._reply import Reply

        if not isinstance(reply, Reply):  # it failed on a missing attribute ('drop')
            raise ConfigError(
                f"MockTransport handler {_named(self._handler)} returned "
                f"{type(reply).__name__} {reply!r:.60}, not a Reply"
            )
        endpoint = self._endpoint
        if reply.drop:
            raise ConnectError(
                f"{endpoint} closed the connection before any response byte", endpoint=endpoint
            )
        headers = CIMultiDict(reply.headers)
        if reply.status >= 300:
            body = b"".join(reply.frames)
            raise await status_error(reply.status, headers, _ready(body), endpoint)
        refused = refused_content_type(reply.status, headers)
        if refused is not None:
            raise content_type_error(reply.status, refused, b"".join(reply.frames), endpoint)
        st.headers_at(clock())
        for i, frame in enumerate(reply.frames):
            if i and reply.frame_delay_s:
                await asyncio.sleep(reply.frame_delay_s)
            st.read(frame, clock())
        st.end(clock())
        if reply.cut:
            raise StreamInterrupted(
                f"connection to {endpoint} dropped mid-stream after "
                f"{st.n_chunks} output chunks: the reply was cut",
                endpoint=endpoint,
                trace=st.partial(),
            )
        return st.finish(keep_headers(headers))

    async def aclose(self) -> None:
        """Nothing to release."""

    async def __aenter__(self) -> MockTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"MockTransport({self._endpoint!r}, requests={len(self.requests)})"


class _Script:
    """A handler that answers with a list of replies in order."""

    def __init__(self, replies: Iterable[Reply]) -> None:
        self._replies = list(replies)
        self._next = 0
        self._past = 0  # requests that came after the script's end

    @property
    def left(self) -> int:
        return len(self._replies) - self._next

    def __call__(self, _: ChatRequest) -> Reply:
        from agentflow._reply import Reply

        if self._next >= len(self._replies):  # a 400: not retried, the test fails at once
            self._past += 1
            n = self._next + self._past
            return Reply.error(400, f"script exhausted: request {n} has no reply")
        self._next += 1
        return self._replies[self._next - 1]


async def _ready(body: bytes) -> bytes:
    return body


def _named(handler: object) -> str:
    name = getattr(handler, "__qualname__", None)
    return repr(name) if isinstance(name, str) else repr(handler)


def check_reply(reply: Reply) -> None:
    """Raise :class:`ConfigError`, naming the field and the value, unless ``reply``'s
    ``frames`` are a list of bytes, its ``status`` an HTTP status (an int from 100 to
    599), ``headers`` a mapping of header names (RFC 9110 tokens) to ``str`` values
    without a control character but a tab, and ``frame_delay_s`` a number of seconds ≥ 0 (each used
    to fail at the first request, a ``TypeError``, or through a
    :class:`~agentflow.testing.ScriptedServer` as "script exhausted" on the retry)."""
    frames: object = reply.frames
    if isinstance(frames, str | bytes | bytearray) or not isinstance(frames, Sequence):
        raise ConfigError(
            f"Reply.frames must be a list of bytes (one per write), got {type(frames).__name__}"
        )
    for i, frame in enumerate(frames):
        if not isinstance(frame, bytes | bytearray):
            raise ConfigError(
                f"Reply.frames[{i}] must be bytes, got {type(frame).__name__} {frame!r:.60}"
                + (" (encode it: b'...' or .encode())" if isinstance(frame, str) else "")
            )
    status: object = reply.status
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise ConfigError(
            f"Reply.status must be an HTTP status, an int from 100 to 599, got {status!r:.60}"
        )
    check_headers(reply.headers, "Reply.headers", "which a header cannot carry", show=True)
    check_seconds(reply.frame_delay_s, "Reply.frame_delay_s", 0.0, MAX_TIMEOUT_S)


class EventCapture:
    """A fleet callback that keeps the events it is given, in order.

    Pass it in ``callbacks=[...]`` (of :class:`~agentflow.Fleet`, or
    :meth:`Session.run <agentflow.Session.run>`). Made by :func:`capture_events`.

    Attributes:
        events: every event received of the types asked for, in order.
        event_types: the ``type`` strings it reads, or ``None`` for all (the bus then
            builds token events for it); ``"attempt_discarded"`` with ``"token"`` — kept
            apart for :meth:`text`, not in ``events`` unless asked for.
    """

    def __init__(self, types: Iterable[str] | None = None) -> None:
        read = None if types is None else frozenset(types)
        # A capture of tokens reads their discards too, for text() alone: ``events`` holds
        # only the types asked for (a "token" capture's events all have a ``text``).
        self._discards_apart = (
            read is not None and "token" in read and ("attempt_discarded" not in read)
        )
        if self._discards_apart:
            read = read | {"attempt_discarded"}  # type: ignore[operator]
        self.event_types: frozenset[str] | None = read
        self.events: list[Event] = []
        # Each kept-apart discard with where it came: how many events were before it and
        # the last of them (code that clears ``events`` for the next run leaves no
        # discard pointing into it: one whose place no longer holds that event is stale).
        self._discards: list[tuple[int, Event, AttemptDiscardedEvent]] = []

    def __call__(self, event: Event) -> None:
        if self._discards_apart and isinstance(event, AttemptDiscardedEvent):
            if self.events:  # (one with no event before it drops nothing)
                self._discards.append((len(self.events), self.events[-1], event))
            return
        self.events.append(event)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def types(self) -> list[str]:
        """Each event's ``type``, in order."""
        return [e.type for e in self.events]

    @overload
    def of_type(self, type: Literal["token"], /) -> list[TokenEvent]: ...
    @overload
    def of_type(self, type: Literal["tool_call"], /) -> list[ToolCallEvent]: ...
    @overload
    def of_type(self, type: Literal["tool_result"], /) -> list[ToolResultEvent]: ...
    @overload
    def of_type(self, type: Literal["turn_end"], /) -> list[TurnEndEvent]: ...
    @overload
    def of_type(self, type: Literal["session_end"], /) -> list[SessionEndEvent]: ...
    @overload
    def of_type(self, type: Literal["attempt_discarded"], /) -> list[AttemptDiscardedEvent]: ...
    @overload
    def of_type(self, type: Literal["retry"], /) -> list[RetryEvent]: ...
    @overload
    def of_type(self, type: Literal["fleet_start"], /) -> list[FleetStartEvent]: ...
    @overload
    def of_type(self, type: Literal["context_trimmed"], /) -> list[ContextTrimmedEvent]: ...
    @overload
    def of_type(self, type: Literal["compaction"], /) -> list[CompactionEvent]: ...
    @overload
    def of_type(self, type: Literal["budget"], /) -> list[BudgetEvent]: ...
    @overload
    def of_type(self, type: Literal["cache_buster"], /) -> list[CacheBusterWarning]: ...
    @overload
    def of_type(self, type: Literal["error"], /) -> list[ErrorEvent]: ...
    @overload
    def of_type(self, type: Literal["fleet_end"], /) -> list[FleetEndEvent]: ...
    @overload
    def of_type(self, *types: str) -> list[Event]: ...
    def of_type(self, *types: str) -> list[Any]:
        """The events whose ``type`` is one of ``types``, in order. One type's events are
        typed as its class: ``of_type("tool_call")[0].call.name`` type-checks.

        Raises:
            ConfigError: a type no event has (a misspelling would find nothing).
        """
        from agentflow._fleet_checks import check_event_types  # (it imports the scheduler)

        check_event_types(types, "EventCapture.of_type(*types)")
        return [e for e in self.events if e.type in types]

    def for_session(self, session_id: str) -> list[Event]:
        """The events of one session, in order."""
        return [e for e in self.events if getattr(e, "session_id", None) == session_id]

    def text(self, session_id: str, kinds: Sequence[str] = ("content",)) -> str:
        """The session's streamed text (``kind`` in ``kinds``), turn after turn, without
        the tokens of attempts that were discarded (:class:`~agentflow.AttemptDiscardedEvent`:
        captured with the tokens, :func:`capture_events`)."""
        turns: dict[int, list[str]] = {}
        events: list[Event] = self.events
        if self._discards:  # put back where they came (after their attempt's tokens)
            events = list(self.events)
            for at, before, discard in reversed(self._discards):
                if at <= len(events) and events[at - 1] is before:
                    events.insert(at, discard)
        for e in events:
            if isinstance(e, TokenEvent):
                if e.session_id == session_id and e.kind in kinds:
                    turns.setdefault(e.turn, []).append(e.text)
            elif isinstance(e, AttemptDiscardedEvent) and e.session_id == session_id:
                turns.pop(e.turn, None)
        return "".join("".join(turns[t]) for t in sorted(turns))

    def __repr__(self) -> str:
        return f"EventCapture({len(self.events)} events)"


def capture_events(*types: str) -> EventCapture:
    """A callback that collects a fleet's events; only ``types`` (e.g. ``"tool_call"``,
    ``"turn_end"``) if given, else every event, tokens included::

        events = capture_events()
        await Fleet(MockTransport(handler), callbacks=[events]).run(sessions)
        assert events.types()[0] == "fleet_start"

    ``"token"`` reads ``"attempt_discarded"`` too, kept apart from ``events`` (which
    holds only tokens then): :meth:`EventCapture.text` drops a failed attempt's tokens
    on its discard, which a capture of tokens alone never got (its text kept the
    discarded attempt's before the retry's).

    Raises:
        ConfigError: a type no event has (a misspelling would capture nothing).
    """
    from agentflow._fleet_checks import check_event_types  # (it imports the scheduler)

    check_event_types(types, "capture_events(*types)")
    return EventCapture(types or None)
