"""One request on one HTTP/1.1 connection (:class:`Exchange`), and the errors that end one.

:class:`~agentflow.transport._h1._Connection` parses each read into the exchange that is
on it; the exchange holds where the reads go (the stream's ``read``), what the caller
awaits (``done``), and the response's state as its head and body arrive.
"""

from __future__ import annotations

import asyncio

from multidict import CIMultiDict

from agentflow._errors import ConnectError, StreamInterrupted, StreamProtocolError
from agentflow.transport._shared import sent_then_closed
from agentflow.transport._stream import StreamState

__all__ = ["Exchange", "dropped", "too_long"]


class Exchange:
    """One request on one connection: where its reads go and what its caller awaits."""

    __slots__ = (
        "bare",
        "bare_mark",
        "complete",
        "done",
        "draining",
        "error_gap",
        "error_parts",
        "error_size",
        "error_timer",
        "error_until",
        "framed",
        "head_size",
        "headers",
        "informational",
        "keep",
        "n_pieces",
        "raw_headers",
        "read",
        "refused",
        "sse",
        "status",
        "stream",
    )

    def __init__(self, done: asyncio.Future[None], stream: StreamState) -> None:
        #: Resolved when the response has ended (``status`` says how), failed otherwise.
        self.done = done
        #: The body's read loop: SSE, trace, first output, idle bookkeeping.
        self.stream = stream
        self.read = stream.read
        self.status = 0  # of the final response, once its head is complete
        self.sse = False  # a 2xx whose body is parsed as an event stream
        self.refused: str | None = None  # the content type of a 2xx that is not a stream
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.informational = False  # inside a 1xx response, which precedes the real one
        self.framed = True  # body delimited by chunks or a length, not by the close
        self.complete = False
        #: Set once ``[DONE]`` arrived before the body's end: the timer that stops waiting
        #: for that end (:data:`DRAIN_AFTER_DONE_S`).
        self.draining: asyncio.TimerHandle | None = None
        self.n_pieces = 0  # body pieces of the read that belong to this response
        self.keep = True  # the connection may be reused afterwards
        self.error_parts: list[bytes] = []
        self.error_size = 0
        #: For a non-2xx: ends the wait for the rest of its body, re-armed by each piece
        #: of it — :func:`error_body_s` (``error_gap``) after the last, and no later than
        #: ``error_until``, the stream's total or first-token deadline (loop time).
        self.error_timer: asyncio.TimerHandle | None = None
        self.error_gap = 0.0
        self.error_until: float | None = None
        self.head_size = 0  # bytes of the header and trailer lines parsed so far
        # Bytes of the reads that carried no body since the body last moved on (``bare_mark``
        # is where it was): a head or trailer that never ends is stopped by this count.
        self.bare = 0
        self.bare_mark = 0


def dropped(
    ex: Exchange, exc: BaseException | None, *, reused: bool, sent: bool = True
) -> Exception:
    """The error for a connection that closed during the request.

    Only a request that never left, or one on a reused kept-alive connection that
    closed before any byte of an answer (the server had closed it as idle: it did not
    read the request), is a :class:`ConnectError`, resent. A new connection carried
    the whole request to a server that then closed it — it may have received it, and
    crashed on it — and a byte received (part of a head, a ``100 Continue``) says it
    did: that is a :class:`StreamInterrupted`, left to the retry policy.
    """
    st = ex.stream
    endpoint = st.endpoint
    why = f"{type(exc).__name__}: {exc}" if exc is not None else "the server closed it"
    # Any byte of an answer went through _bare_read (no body yet) or set the status.
    received = ex.status or ex.bare_mark
    if not sent or (reused and not received):
        err: Exception = ConnectError(f"no response from {endpoint}: {why}", endpoint=endpoint)
    elif not ex.status:
        state = "an unfinished response head" if received else "no response byte"
        err = sent_then_closed(endpoint, state, why, st.partial())
    else:
        err = StreamInterrupted(
            f"connection to {endpoint} dropped mid-stream after {st.n_chunks} output chunks: {why}",
            endpoint=endpoint,
            trace=st.partial(),
        )
    err.__cause__ = exc
    return err


def too_long(ex: Exchange, what: str, limit: int, now: int) -> StreamProtocolError:
    """The error for a head, header line or trailers over ``limit`` bytes."""
    st = ex.stream
    return StreamProtocolError(
        f"{st.endpoint} sent {what}, more than the {limit}-byte limit",
        endpoint=st.endpoint,
        trace=st.partial(now),
    )
