"""One response body being read: the read loop every transport shares.

Each transport gets a response its own way — :class:`HTTPTransport` inside its
protocol's ``data_received`` (with kernel timestamps), :class:`AiohttpTransport` and
:class:`OpenAITransport` from another library's byte iterator, :class:`SimTransport`
as payloads the simulator hands over, ``MockTransport`` frame by frame — and then
does the same thing with it, which :class:`StreamState` does once:

- bytes → SSE ``data`` payloads (:class:`SSEDecoder`, bounded by ``max_event_bytes``);
- payloads → the trace (:class:`TraceBuilder`), each at the time of the read that
  carried it (a kernel stamp, where the transport has one);
- the time limits' bookkeeping: the time of the latest read that completed a data
  event (what the idle watchdog of :class:`Deadlines` reads; comments do not count),
  and the first output-bearing chunk, which ends the first-token limit;
- the end: the last event with no blank line after it, then ``[DONE]`` or a finish
  reason required (:meth:`finish`). ``[DONE]`` itself ends the exchange (:attr:`done`): the
  rest of the body is waited for only :data:`DRAIN_AFTER_DONE_S`, for the connection's
  sake — a body that stays open or is reset after ``[DONE]`` does not turn a finished
  answer into an error (its connection is closed, not reused); a partial trace for every
  error
  (:meth:`partial`), and a protocol error raised below the builder (the decoder's
  event-size limit) given that partial trace, as the builder's own errors carry one.

The transports keep only what is theirs: connections, HTTP framing, status codes and
error bodies. Nothing here writes another object's fields: the transports call
:meth:`headers_at`, :meth:`read`, :meth:`payloads` and :meth:`end`; :class:`Deadlines`
reads :attr:`last_ns` from this object.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol

from agentflow._errors import StreamProtocolError, StreamTimeout
from agentflow._trace import TurnTrace
from agentflow.transport._deadline import Deadlines
from agentflow.transport._decode import TraceBuilder
from agentflow.transport._request import Timeouts
from agentflow.transport._sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder
from agentflow.typing import Clock, DeltaSink

__all__ = [
    "DRAIN_AFTER_DONE_S",
    "LimitedTransport",
    "StreamState",
    "drain",
    "finish_stream",
    "open_stream",
]

#: How long the rest of a body is waited for after ``[DONE]`` (its last chunk, usually
#: already on its way), so that the connection can be reused — as the OpenAI SDK does
#: (``openai._streaming_cleanup``, 0.1 s). A body that does not end by then is left, its
#: connection closed; the answer is returned either way.
DRAIN_AFTER_DONE_S = 0.1


class LimitedTransport(Protocol):
    """What :func:`open_stream` reads of a transport: its label, clock and limits (the
    HTTP-style transports: ``HTTPTransport``, ``AiohttpTransport``, ``OpenAITransport``)."""

    @property
    def endpoint(self) -> str:
        """The label traces and errors carry."""
        ...

    max_event_bytes: int
    _timeouts: Timeouts
    _clock: Clock


def open_stream(
    transport: LimitedTransport, sink: DeltaSink | None, reconnects: int = 0
) -> tuple[StreamState, Deadlines]:
    """A request of ``transport``'s is sent now: its stream state, and the state's time
    limits (run the stream inside ``async with limits.scope():``).

    One construction for the transports that have limits, so each builds its state the same
    way (once per request, not per read).
    """
    st = StreamState(
        transport.endpoint,
        transport._clock,
        sink,
        timeouts=transport._timeouts,
        max_event_bytes=transport.max_event_bytes,
        reconnects=reconnects,
    )
    limits = st.limits
    assert limits is not None  # timeouts were given
    return st, limits


class StreamState:
    """The state of one streamed response, fed reads (or payloads) in order, then ended.

    Args:
        endpoint: the label traces and errors carry.
        clock: the transport's nanosecond clock; the request counts as sent when this
            object is made, until the transport says when it wrote it (:meth:`sent_at`).
        sink: receives each delta as it is decoded.
        timeouts: the stream's limits; ``None`` for none (the in-process transports).
            With limits, run the stream inside ``async with state.limits:``.
        max_event_bytes: the longest SSE event accepted.
        reconnects: how many times the request was resent before this attempt (on the trace).
    """

    __slots__ = (
        "_decode",
        "_feed",
        "builder",
        "clock",
        "decoder",
        "ended_ns",
        "endpoint",
        "last_ns",
        "limits",
        "reconnects",
        "waiting_first",
    )

    def __init__(
        self,
        endpoint: str,
        clock: Clock,
        sink: DeltaSink | None = None,
        *,
        timeouts: Timeouts | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        reconnects: int = 0,
    ) -> None:
        sent = clock()
        self.endpoint = endpoint
        self.clock = clock
        self.reconnects = reconnects
        self.builder = builder = TraceBuilder(
            endpoint=endpoint, sent_ns=sent, sink=sink, reconnects=reconnects
        )
        self._feed = builder.feed
        self.decoder = decoder = SSEDecoder(max_event_bytes, endpoint=endpoint)
        self._decode = decoder.feed
        #: Clock time of the latest read that completed a data event (the send time before
        #: any): the idle watchdog's measure of silence.
        self.last_ns = sent
        #: When the body ended (the stamp of the read that ended it, given to :meth:`end`);
        #: ``None`` before. :meth:`finish` takes it as the stream's end.
        self.ended_ns: int | None = None
        #: The stream's time limits, or ``None``.
        self.limits = limits = None if timeouts is None else Deadlines(timeouts, self)
        #: Whether the first-token limit still waits for the first output.
        self.waiting_first = limits is not None and limits.waiting_first

    @property
    def done(self) -> bool:
        """Whether ``[DONE]`` has arrived: the answer is complete, whatever the body does next."""
        return self.builder.done

    @property
    def n_chunks(self) -> int:
        """Output-bearing chunks so far."""
        return len(self.builder.chunk_ns)

    def sent_at(self, t_ns: int) -> None:
        """The request was handed to the socket at ``t_ns`` (after its connection was
        opened): the trace's ``sent_ns``, and the start of the wait for the first data
        event."""
        b = self.builder
        b.sent_ns = b.headers_ns = self.last_ns = t_ns

    def headers_at(self, t_ns: int) -> None:
        """The response head arrived at ``t_ns``."""
        self.builder.headers_ns = t_ns

    def read(self, data: bytes, now: int) -> None:
        """One read of the body, received at ``now``: decode it, feed its events."""
        try:
            try:
                payloads = self._decode(data)
            except StreamProtocolError:  # an event too long: the ones before it are output
                payloads = self.decoder.completed
                if b"[DONE]" not in payloads:
                    for payload in payloads:
                        self._feed(payload, now)
                    raise
                # (else it came after [DONE]: the answer stands, as below)
            if payloads:  # only data events hold the idle limit off, not comments
                self.last_ns = now
                feed = self._feed
                builder = self.builder
                for payload in payloads:
                    feed(payload, now)
                    if builder.done:  # what follows [DONE] in its read is not the answer's
                        break
                if self.waiting_first and self.builder.chunk_ns:
                    self.waiting_first = False
                    self.limits.first_output()  # type: ignore[union-attr]
                if self.builder.done and self.limits is not None:
                    self.limits.met()  # the answer is complete: the rest is not timed
        except StreamProtocolError as exc:  # the decoder's size limit, or a sink's
            self._attach(exc, now)
            raise

    def payloads(self, payloads: list[bytes], now: int) -> None:
        """Payloads already split from their SSE frames (the simulator's), received at ``now``."""
        self.last_ns = now
        feed = self._feed
        for payload in payloads:
            feed(payload, now)
        if self.waiting_first and self.builder.chunk_ns:
            self.waiting_first = False
            self.limits.first_output()  # type: ignore[union-attr]

    async def read_all(self, body: AsyncIterable[bytes]) -> bool:
        """Read a body whose reads another library delivers (aiohttp, httpx) to its end,
        or to ``[DONE]``, each read stamped with this stream's clock when it is taken.

        Returns whether the body ended. After ``[DONE]`` the answer is complete: the rest
        of the body is drained for at most :data:`DRAIN_AFTER_DONE_S` (what it holds is
        ignored, and so is an error), and ``False`` if it did not end by then — the
        connection must not be reused.
        """
        clock = self.clock
        read = self.read
        builder = self.builder
        reads = aiter(body)
        async for data in reads:
            read(data, clock())
            if builder.done:
                return await drain(reads)
        self.end(clock())  # (kept as the end: finish() may run after more awaits)
        return True

    def end(self, now: int) -> None:
        """The body ended at ``now``: feed a last event that had no blank line after it.
        One that does not parse was cut by the end of the body (a connection closed in
        the middle of an event): ``unfinished``, as a stream that stopped early is.
        ``now`` is the stream's end for :meth:`finish`."""
        self.ended_ns = now
        try:
            feed = self._feed
            for payload in self.decoder.flush():
                try:
                    feed(payload, now)
                except StreamProtocolError as exc:
                    exc.unfinished = True
                    raise
        except StreamProtocolError as exc:
            self._attach(exc, now)
            raise

    def attach(self, exc: BaseException, now: int) -> None:
        """Give a :class:`StreamProtocolError` raised below the builder the partial trace."""
        if isinstance(exc, StreamProtocolError):
            self._attach(exc, now)

    def _attach(self, exc: StreamProtocolError, now: int) -> None:
        if exc.trace is None:
            exc.trace = self.partial(now)
            if exc.endpoint is None:
                exc.endpoint = self.endpoint

    def partial(self, end_ns: int | None = None) -> TurnTrace:
        """What arrived so far, as a trace (for an error); ``end_ns`` defaults to now."""
        return self.builder.finish(
            self.clock() if end_ns is None else end_ns, reconnects=self.reconnects
        )

    def finish(self, headers: dict[str, str], end_ns: int | None = None) -> TurnTrace:
        """The trace of a body that ended cleanly; it must have ended with ``[DONE]`` or
        a finish reason (else a :class:`StreamProtocolError` with the trace). Its end is when
        ``[DONE]`` arrived, else ``end_ns``, else the stamp given to :meth:`end` (the read
        that ended the body, not when the waiting task woke), else now."""
        if end_ns is None:
            end_ns = self.clock() if self.ended_ns is None else self.ended_ns
        return finish_stream(self.builder, end_ns, self.reconnects, headers)

    def timeout(self) -> StreamTimeout:
        """The :class:`StreamTimeout` for the limit that ran out, with the partial trace."""
        assert self.limits is not None
        return self.limits.error(self.endpoint, self.partial())


async def drain(reads: AsyncIterator[bytes]) -> bool:
    """Discard the rest of a body after ``[DONE]``, for at most :data:`DRAIN_AFTER_DONE_S`;
    whether it ended (cleanly) in that time. Its errors are not the answer's: ignored."""
    try:
        async with asyncio.timeout(DRAIN_AFTER_DONE_S):
            async for _ in reads:
                pass
    except Exception:  # TimeoutError: it did not end; or it was cut (a reset)
        return False
    return True


def finish_stream(
    builder: TraceBuilder, end_ns: int, reconnects: int, headers: dict[str, str]
) -> TurnTrace:
    """Close a builder at end of body: a stream must end with ``[DONE]`` or a finish reason."""
    trace = builder.finish(end_ns, reconnects=reconnects, headers=headers)
    if not trace.done and trace.finish_reason is None:
        raise StreamProtocolError(
            f"stream from {builder.endpoint} ended after {trace.n_events} events "
            "with neither a finish_reason nor [DONE]",
            endpoint=builder.endpoint,
            trace=trace,
            unfinished=True,
        )
    return trace
