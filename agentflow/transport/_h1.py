"""The HTTP/1.1 protocol under :class:`HTTPTransport`: each read is parsed where it lands.

:class:`_Connection` is the ``asyncio.Protocol`` of one pooled connection. While a request
is on it (an :class:`~agentflow.transport._exchange.Exchange`), ``data_received`` does the
whole per-read path synchronously — one ``clock()`` timestamp (or the kernel's, see
``_kstamp``), the HTTP framing (``httptools``), and the body handed to
:meth:`StreamState.read` — then resolves or fails the exchange's future when the response
ends.
"""

from __future__ import annotations

from typing import Any

import httptools
from multidict import CIMultiDict

from agentflow._errors import StreamProtocolError
from agentflow.transport._error_body import error_body_s, error_body_until
from agentflow.transport._exchange import Exchange, dropped, too_long
from agentflow.transport._pool import ConnectionPool, PooledConnection
from agentflow.transport._shared import MAX_ERROR_BODY, refused_content_type
from agentflow.transport._stream import DRAIN_AFTER_DONE_S, StreamState

__all__ = ["MAX_HEADER_LINE", "MAX_HEAD_BYTES"]

#: The most bytes a response may send outside its body before the body's next byte: its
#: head (with any ``1xx`` heads before it), or its trailers. aiohttp stops at 8190 bytes
#: per line; a model server's head is well under 1 KiB.
MAX_HEAD_BYTES = 64 * 1024
#: The longest header (or trailer) line accepted, name and value.
MAX_HEADER_LINE = 8 * 1024


class _Connection(PooledConnection):
    """One HTTP/1.1 connection; while a request is on it, each read is parsed on arrival."""

    __slots__ = ("_ex", "_now", "_parser", "_pieces", "on_body")

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        super().__init__(pool)
        self._ex: Exchange | None = None
        self._now = 0
        self._pieces: list[bytes] = []
        # httptools looks its callbacks up once, here. With on_body bound to list.append
        # each body piece (one per chunked frame) costs a C call, no Python frame; the
        # pieces of one read are then split into SSE events together.
        self.on_body = self._pieces.append
        self._parser = httptools.HttpResponseParser(self)

    def start(self, request: bytes, stream: StreamState) -> Exchange:
        """Send ``request``; the body that follows feeds ``stream`` until the response ends."""
        ex = self._ex = Exchange(self.pool.loop.create_future(), stream)
        self._pieces.clear()
        tr = self.transport
        if tr is None or tr.is_closing():
            self._settle(ex, dropped(ex, None, reused=self.reused, sent=False))
        else:
            stream.sent_at(stream.clock())  # connected: connecting is not the server's time
            tr.write(request)
        return ex

    # -- asyncio.Protocol: the per-read path ---------------------------------------------

    def data_received(self, data: bytes) -> None:
        """asyncio: one read. Parse it to the end, synchronously, with one timestamp."""
        ex = self._ex
        if ex is None:
            # Bytes with no request on the connection (a server's parting "408", say):
            # whatever it is, the connection is out of step and cannot be reused.
            self.abort()
            return
        # rx_ns: the kernel's arrival stamp, when the connection has one (kernel_timestamps).
        self._now = now = self.rx_ns or ex.stream.clock()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if ex.draining is not None:  # junk after [DONE]: the answer stands
                self._drain_over(ex)
                return
            if ex.status >= 300 and not ex.complete:  # in an error body: the status stands
                self._error_body_over(ex)
                return
            if not ex.complete:
                err = self._invalid(ex, exc, now)  # (reads the body before the junk)
                if ex.stream.done:  # [DONE] came first, in this read: the answer stands
                    self._drain_over(ex)
                else:
                    self._fail(ex, err)
                return
            ex.keep = False  # junk after a complete response: keep the response, not the line
        pieces = self._pieces
        if ex.complete:
            del pieces[ex.n_pieces :]  # anything later belongs to no request of ours
        if pieces:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            if ex.sse:
                if ex.draining is None:  # (else: the body after [DONE], discarded)
                    try:
                        ex.read(body, now)
                    except Exception as exc:  # the stream's protocol/server errors, a sink's
                        self._fail(ex, exc)
                        return
                    if not ex.complete and ex.stream.builder.done:
                        # [DONE]: the answer is complete. The rest of the body (its last
                        # chunk, usually on its way) is waited for briefly, for the
                        # connection's sake; see _drain_over.
                        ex.draining = self.pool.loop.call_later(
                            DRAIN_AFTER_DONE_S, self._drain_over, ex
                        )
            elif self._add_error_body(ex, body, now):
                return
        elif not ex.complete and ex.draining is None and self._bare_read(ex, len(data), now):
            return  # no body in this read: the head (or a trailer) goes on, within its limit
        if ex.complete:
            self._finish(ex, now)

    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio: the socket closed. Mid-request, that ends the request one way or another."""
        super().connection_lost(exc)
        ex = self._ex
        if ex is None:
            return
        if ex.draining is not None or (ex.status and not ex.framed and exc is None):
            # A body delimited by the close has just ended, or one closed (or reset) after
            # [DONE]: this is success.
            ex.keep = False
            self._finish(ex, ex.stream.clock())
        elif ex.status >= 300:  # an error body cut short: its status (and Retry-After) stand
            self._error_body_over(ex)
        else:
            self._settle(ex, dropped(ex, exc, reused=self.reused))

    def abort(self) -> None:
        """Close at once; a request still on the connection is abandoned, not failed."""
        ex, self._ex = self._ex, None
        if ex is not None and ex.draining is not None:
            ex.draining.cancel()
        if ex is not None and ex.error_timer is not None:
            ex.error_timer.cancel()
        super().abort()

    # -- httptools callbacks (once per response, not per read) --------------------------

    def on_message_begin(self) -> None:
        """httptools: a response starts. A second one after ours is junk."""
        ex = self._ex
        if ex is not None and ex.complete:
            ex.keep = False

    def on_header(self, name: bytes, value: bytes) -> None:
        """httptools: one response header (or trailer), within the head's limits."""
        ex = self._ex
        if ex is not None and not ex.complete:
            size = len(name) + len(value)
            ex.head_size += size
            if size > MAX_HEADER_LINE:
                raise too_long(ex, f"a header line of {size} bytes", MAX_HEADER_LINE, self._now)
            if ex.head_size > MAX_HEAD_BYTES:
                what = "trailers" if ex.status else "headers"
                raise too_long(ex, f"{ex.head_size} bytes of {what}", MAX_HEAD_BYTES, self._now)
            ex.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        """httptools: the response head is complete."""
        ex = self._ex
        if ex is None or ex.complete:
            return
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the real response follows
            ex.informational = True
            ex.raw_headers.clear()
            return
        ex.status = status
        ex.head_size = 0  # trailers, if any, have a limit of their own
        # As aiohttp decodes them, so both transports report the same header values.
        headers = ex.headers = CIMultiDict(
            (n.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
            for n, v in ex.raw_headers
        )
        ex.refused = refused_content_type(status, headers)
        ex.sse = status < 300 and ex.refused is None
        coding = headers.get("Content-Encoding", "").strip().lower()
        if ex.sse and coding not in ("", "identity"):
            # Asked for none (Accept-Encoding: identity): compressed bytes parse to no event.
            st = ex.stream
            raise StreamProtocolError(
                f"{st.endpoint} sent a stream with Content-Encoding {coding!r}, though the "
                "request asked for none; HTTPTransport does not decompress (a proxy that "
                "compresses? AiohttpTransport decompresses)",
                endpoint=st.endpoint,
                trace=st.partial(self._now),
            )
        ex.framed = (
            "chunked" in headers.get("Transfer-Encoding", "").lower()
            or "Content-Length" in headers
            or status in (204, 304)
        )
        ex.stream.headers_at(self._now)
        if status >= 300:  # the status is the answer: its body gets a short while of its own
            limits = ex.stream.limits
            ex.error_gap = error_body_s(limits.timeouts if limits is not None else None)
            if limits is not None:
                ex.error_until = limits.until()
                # Not the idle limit, nor the total or first-token one as such (a
                # StreamTimeout, the status lost): the timer ends the body by them.
                limits.met()
            self._arm_error_timer(ex)

    def on_message_complete(self) -> None:
        """httptools: the response body is complete (its pieces are still to be parsed)."""
        ex = self._ex
        if ex is None or ex.complete:
            return
        if ex.informational:
            ex.informational = False
            return
        ex.complete = True
        ex.n_pieces = len(self._pieces)
        # Asked here: llhttp clears the flags it answers from once this callback returns.
        ex.keep = ex.keep and self._parser.should_keep_alive()

    # -- ends of an exchange -------------------------------------------------------------

    def _add_error_body(self, ex: Exchange, body: bytes, now: int) -> bool:
        """Keep up to 64 KiB of a body that is not a stream (a non-2xx, or a 2xx page
        or document); at the cap, end the exchange (True)."""
        room = MAX_ERROR_BODY - ex.error_size
        if len(body) < room:
            ex.error_parts.append(body)
            ex.error_size += len(body)
            if ex.error_timer is not None and not ex.complete:
                self._arm_error_timer(ex)  # the body moves on: the wait starts again
            return False
        ex.error_parts.append(body[:room])
        ex.error_size = MAX_ERROR_BODY
        if not ex.complete:
            ex.keep = False  # the rest is left unread
            ex.complete = True
        self._finish(ex, now)
        return True

    def _arm_error_timer(self, ex: Exchange) -> None:
        """(Re)start the wait for the next piece of an error body."""
        if ex.error_timer is not None:
            ex.error_timer.cancel()
        until = error_body_until(ex.error_gap, ex.error_until)
        ex.error_timer = self.pool.loop.call_at(until, self._error_body_over, ex)

    def _error_body_over(self, ex: Exchange) -> None:
        """A non-2xx's body was cut (a close, a reset, bytes that are not HTTP), stalled
        for :func:`error_body_s` or ran into the total (or first-token) limit: the answer
        is its status with what arrived of the body, and the connection is not reused."""
        if self._ex is not ex:
            return
        pieces = self._pieces  # (a read's body before the junk that ended it)
        if pieces and not ex.complete:
            body = b"".join(pieces)
            pieces.clear()
            self._add_error_body(ex, body, ex.stream.clock())
            if self._ex is not ex:  # (that filled the 64 KiB and ended it)
                return
        ex.keep = False
        ex.complete = True
        self._finish(ex, ex.stream.clock())

    def _drain_over(self, ex: Exchange) -> None:
        """The body did not end soon after ``[DONE]`` (or went on with junk): the answer
        stands, the connection is not reused (its body is unfinished)."""
        if self._ex is ex:
            ex.keep = False
            self._finish(ex, ex.stream.clock())

    def _finish(self, ex: Exchange, now: int) -> None:
        """The response ended cleanly (or after ``[DONE]``): flush the last event, wake
        the caller."""
        if ex.error_timer is not None:
            ex.error_timer.cancel()
        if ex.draining is not None:
            ex.draining.cancel()
        elif ex.sse and not ex.stream.done:  # (after [DONE], nothing is the answer's)
            try:
                ex.stream.end(now)  # a last event with no blank line after it
            except Exception as exc:
                self._fail(ex, exc)
                return
        self._ex = None
        if not ex.done.done():
            ex.done.set_result(None)

    def _fail(self, ex: Exchange, exc: BaseException) -> None:
        """The request failed on this connection: fail the caller, close the connection."""
        self._settle(ex, exc)
        self.abort()

    def _settle(self, ex: Exchange, exc: BaseException) -> None:
        if ex.error_timer is not None:
            ex.error_timer.cancel()
        if self._ex is ex:
            self._ex = None
        # A cancelled caller has already gone (and closed the connection).
        if not ex.done.done():
            ex.done.set_exception(exc)

    def _bare_read(self, ex: Exchange, size: int, now: int) -> bool:
        """A read that carried no body byte (off the per-read path of a stream's body):
        count it; past :data:`MAX_HEAD_BYTES` since the body last moved on, fail the
        exchange (True). The count starts again once the body has moved on."""
        mark = ex.stream.builder.n_events + ex.error_size + 1
        if mark != ex.bare_mark:
            ex.bare_mark = mark
            ex.bare = 0
        ex.bare += size
        if ex.bare <= MAX_HEAD_BYTES:
            return False
        what = "a response head" if not ex.status else "trailers"
        self._fail(ex, too_long(ex, f"{what} of over {ex.bare} bytes", MAX_HEAD_BYTES, now))
        return True

    def _invalid(self, ex: Exchange, exc: Exception, now: int) -> Exception:
        """The error for bytes that are not HTTP/1.1 (a bad status line, chunk size, …);
        the one a callback of ours raised (a head over its limit), when it was that.
        The body the read carried before them is read first: its output is on the trace
        (and its own error, if it has one, came first)."""
        st = ex.stream
        pieces = self._pieces
        if pieces and ex.sse:
            body = b"".join(pieces)
            pieces.clear()
            try:
                ex.read(body, now)
            except Exception as first:
                return first
        ours = exc.__context__
        if isinstance(ours, StreamProtocolError):
            ours.trace = st.partial(now)
            return ours
        endpoint = st.endpoint
        err = StreamProtocolError(
            f"{endpoint} sent an invalid HTTP response after "
            f"{st.n_chunks} output chunks: {type(exc).__name__}: {exc}",
            endpoint=endpoint,
            trace=st.partial(now),
        )
        err.__cause__ = exc
        return err
