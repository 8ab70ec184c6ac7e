"""The SSE stream writer: one streamed response, written as HTTP/1.1 chunked frames.

Once the headers are out, the server writes straight onto the transport: all the SSE
events one engine step produced for one request go out as ONE chunk in ONE
``transport.write`` (aiohttp's ``StreamResponse.write`` costs an await and its own
framing per call). :class:`SSEStream` is the request's
:class:`~agentflow.sim.request.StreamConsumer`: payloads are collected in
:meth:`~SSEStream.on_payloads` and written by :meth:`~SSEStream.flush`, which the
driver's flush hook calls once per step (or once per batch of late steps). Before the
headers are out, and while a stall fault holds the stream, frames wait in the same
buffer. A mid-stream fault (:class:`~agentflow.sim.faults.StreamFault`) strikes through
:meth:`~SSEStream.strike` and :meth:`~SSEStream.stall`.

:class:`BodyCollector` is the consumer of a non-streamed request: it waits for the one
``chat.completion`` body.
"""

from __future__ import annotations

import asyncio

from agentflow.sim.faults import Fault, StreamFault, reset_connection
from agentflow.sim.request import SimRequest

__all__ = ["SSE_HEADERS", "BodyCollector", "SSEStream"]

#: The headers of a streamed answer.
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
}
_CRLF = b"\r\n"


class SSEStream:
    """One streamed response: a :class:`~agentflow.sim.request.StreamConsumer` that
    writes chunked frames.

    Args:
        loop: the server's event loop.
        fault: the request's fault, if any (a mid-stream kind strikes here).
        max_buffer: bytes the transport may hold for a client that does not read before
            the stream is dropped.
        dirty_list: where a stream that has something to write puts itself, for the
            server's flush hook.

    ``ended`` resolves to how the stream ended: ``"done"``, ``"cut"``, ``"reset"``,
    ``"gone"`` (the client left) or ``"aborted"`` (the simulator stopped).
    """

    __slots__ = (
        "_dirty",
        "_dirty_list",
        "_fault",
        "_held",
        "_last",
        "_max_buffer",
        "_out",
        "_pending_fault",
        "_strike",
        "_timer",
        "_transport",
        "ended",
        "loop",
        "request",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fault: Fault | None,
        max_buffer: int,
        dirty_list: list[SSEStream],
    ) -> None:
        self.loop = loop
        self.ended: asyncio.Future[str] = loop.create_future()
        self.request: SimRequest | None = None
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._last = False
        self._dirty = False
        self._dirty_list = dirty_list
        self._held = True  # until attached, and while stalled
        self._pending_fault = fault
        self._fault: StreamFault | None = None
        self._strike: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._max_buffer = max_buffer

    def set_request(self, request: SimRequest) -> None:
        """The driver accepted the request: a mid-stream fault can now be placed."""
        self.request = request
        if self._pending_fault is not None:
            self._fault = StreamFault(self._pending_fault, request)

    def attach(self, transport: asyncio.Transport | None) -> None:
        """The headers are out: write what waited, and from now on write directly."""
        if self.ended.done():
            return
        if transport is None or transport.is_closing():
            self._gone()
            return
        self._transport = transport
        if self._timer is None:
            self._held = False
            self.flush()

    def _end(self, how: str) -> None:
        if not self.ended.done():
            self.ended.set_result(how)

    # --- StreamConsumer ----------------------------------------------------------------

    def on_payloads(self, payloads: list[bytes], last: bool) -> None:
        """Collect one delivery as SSE events (written by the next :meth:`flush`)."""
        fault = self._fault
        if fault is not None and fault.on_payloads(self, payloads, last):
            return
        if len(payloads) == 1:
            self._out.append(b"data: " + payloads[0] + b"\n\n")
        else:
            self._out.append(b"data: " + b"\n\ndata: ".join(payloads) + b"\n\n")
        if last:
            self._last = True
        if not self._dirty:
            self._dirty = True
            self._dirty_list.append(self)

    def on_abort(self, reason: str) -> None:
        """The simulator stopped: close the connection."""
        tr = self._transport
        if tr is not None and not tr.is_closing():
            tr.abort()
        self._end("aborted")

    def flush(self) -> None:
        """Write what was collected as one chunked frame (unless held)."""
        self._dirty = False
        if self._held or self.ended.done():
            return
        out = self._out
        if out:
            tr = self._transport
            if tr is None or tr.is_closing():
                self._gone()
                return
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            tr.write(b"%x\r\n" % len(data) + data + _CRLF)
            if tr.get_write_buffer_size() > self._max_buffer and not self._last:
                self._gone()  # the client stopped reading; do not buffer without bound
                tr.abort()
                return
        if self._strike is not None:
            if self._strike == "reset":
                reset_connection(self._transport)
            self._end(self._strike)
        elif self._last:
            self._end("done")

    def _gone(self) -> None:
        if self.request is not None:
            self.request.cancel()
        self._end("gone")

    # --- StrikeTarget (mid-stream faults) ---------------------------------------------

    def strike(self, how: str) -> None:
        """Write what was collected, then end the response (``"reset"`` or ``"cut"``)."""
        self._strike = how
        if not self._held:
            self.flush()

    def stall(self, seconds: float) -> None:
        """Write what was collected, then hold every later frame for ``seconds``."""
        self.flush()
        self._held = True
        self._timer = self.loop.call_later(seconds, self._unstall)

    def _unstall(self) -> None:
        self._timer = None
        if self._transport is not None:
            self._held = False
            self.flush()

    def close(self) -> None:
        """The handler is done: stop a stall's timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class BodyCollector:
    """A non-streamed response: waits for the one ``chat.completion`` body."""

    __slots__ = ("future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[bytes] = loop.create_future()

    def on_payloads(self, payloads: list[bytes], last: bool) -> None:
        """Keep the body (the last delivery's last payload)."""
        if last and not self.future.done():
            self.future.set_result(payloads[-1])

    def on_abort(self, reason: str) -> None:
        """The simulator stopped before the body."""
        if not self.future.done():
            self.future.set_exception(ConnectionAbortedError(reason))
