"""A small Server-Sent Events splitter: bytes in, ``data`` payloads out, in linear time.

Only what chat-completion streams use is kept: ``data:`` fields (several in one
event are joined with ``\\n``). Comments (``: ping``), other fields, events with no
``data`` field and events whose data is empty (``data:`` alone — a keep-alive: a chat
payload is JSON or ``[DONE]``) yield nothing. A last event with no blank line after
it is still yielded by :meth:`SSEDecoder.flush` (the spec drops it; llama.cpp ends
its streams that way). Line ends may be ``\\n``, ``\\r\\n`` or ``\\r``, and any event
or line may be split across reads. One UTF-8 byte order mark at the very start of the
stream is dropped, as the spec says (also when its three bytes come in more than one
read); anywhere else it is data. The common case — one ``data:`` line per event, LF line
ends — takes one ``split`` and one slice per event: the stream's start is looked at in
the first read only (it is held as the CR state is, so the reads after it pay nothing).

**Linear, bounded.** Each byte is looked at a constant number of times however it
is cut into reads: an unfinished event is kept as a list of its reads and joined
once, when its blank line arrives; only the new read is searched for that blank line
(and for CRs). An event longer than ``max_event_bytes`` (its field names and line
ends included, up to its blank line) is a :class:`StreamProtocolError` as soon as
that many of its bytes are held — a server that never ends an event cannot grow the
client's memory without limit. The events that ended before it in the same read are kept
in :attr:`SSEDecoder.completed` (output received, for the error's partial trace). (The
decoder it replaced re-joined and re-scanned the whole held buffer on every read: 7.3 s of
CPU for a 32 MiB unterminated line in 64 KiB reads; see ``benchmarks/sse_limits.py``.)
"""

from __future__ import annotations

from agentflow._errors import ConfigError, StreamProtocolError

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SSEDecoder", "check_max_event_bytes"]

#: The UTF-8 byte order mark (U+FEFF), which a stream may start with (WHATWG HTML, "event
#: stream interpretation": one leading BOM is stripped).
_BOM = b"\xef\xbb\xbf"
#: ``SSEDecoder._cr`` before any byte: the first read goes through ``_normalise``, which
#: drops a BOM; 1 there means a CR is held back.
_START = 2

#: The default longest SSE event, 4 MiB: far above any chat chunk (a whole tool call's
#: arguments in one event included), far below what would hurt a client holding
#: thousands of streams.
DEFAULT_MAX_EVENT_BYTES = 4 * 2**20


def check_max_event_bytes(value: object, owner: str = "SSEDecoder") -> int:
    """``value`` if it is a valid event-size limit (an int ≥ 1), else a :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}.max_event_bytes must be an int ≥ 1, got {value!r}")
    return value


class SSEDecoder:
    """Incremental SSE decoder; feed it reads in order, get back complete payloads.

    Args:
        max_event_bytes: the longest event accepted (default 4 MiB); a longer one is a
            :class:`StreamProtocolError` naming this limit.
        endpoint: named in that error.
    """

    __slots__ = (
        "_bom",
        "_cr",
        "_endpoint",
        "_parts",
        "_pending",
        "completed",
        "max_event_bytes",
        "scanned",
    )

    def __init__(
        self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, *, endpoint: str | None = None
    ) -> None:
        #: The longest event accepted, in bytes.
        self.max_event_bytes = check_max_event_bytes(max_event_bytes)
        self._endpoint = endpoint
        self._parts: list[bytes] = []  # the unfinished event's bytes, line ends normalised
        self._pending = 0  # their total length
        # 1: the last read ended with a CR, held back (it may start a CRLF); _START: no
        # bytes yet (the first read is looked at for a BOM); 0: neither.
        self._cr = _START
        self._bom = b""  # the stream's first bytes while they may still be a BOM's start
        #: Bytes the general path has searched (for the blank line, for CRs), summed over
        #: reads: a work counter for tests and benchmarks. It grows with the input, not
        #: with the input times the reads. Reads taken by the fast path (exactly one
        #: whole single-line event) are not counted.
        self.scanned = 0
        #: After :meth:`feed` raised for a too-long event: the payloads of the events that
        #: ended in that read before it (output received, for the partial trace).
        self.completed: list[bytes] = []

    def feed(self, data: bytes) -> list[bytes]:
        """Add one read; return the ``data`` payload of every event it completed."""
        if (
            not self._pending
            and not self._cr
            and data.startswith(b"data: ")
            and data.endswith(b"\n\n")
            and data.count(b"\n") == 2
            and b"\r" not in data
            and 8 < len(data) <= self.max_event_bytes
        ):
            # A paced stream's usual read: exactly one whole single-line event.
            return [data[6:-2]]
        self.scanned += len(data)
        if self._cr or b"\r" in data:
            data = self._normalise(data)
        if self._pending:
            return self._continue(data)
        return self._split(data)

    def _normalise(self, data: bytes) -> bytes:
        """CRLF and lone CR → LF, holding back a final CR (its LF may be in the next read);
        at the stream's start, a BOM dropped first."""
        held = self._cr
        if held:
            self._cr = 0
            if held == _START:
                data = self._start(data)
                if b"\r" not in data:
                    return data
            else:
                data = b"\r" + data
        if data.endswith(b"\r"):
            data = data[:-1]
            self._cr = 1
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    def _start(self, data: bytes) -> bytes:
        """The stream's first bytes without a leading BOM; nothing while they could still
        be the start of one (they are held, and looked at again with the next read)."""
        data = self._bom + data
        if len(data) < len(_BOM) and _BOM.startswith(data):
            self._bom = data
            self._cr = _START
            return b""
        self._bom = b""
        return data[len(_BOM) :] if data.startswith(_BOM) else data

    def _split(self, data: bytes) -> list[bytes]:
        """Nothing held: split ``data`` into whole events and a held-back rest."""
        events = data.split(b"\n\n")
        rest = events.pop()
        if len(data) > self.max_event_bytes:  # only then can one event be too long
            limit = self.max_event_bytes
            for i, event in enumerate(events):
                if len(event) > limit:
                    self._refuse(len(event), _payloads(events[:i]))
        if rest:
            try:
                self._hold(rest)
            except StreamProtocolError:
                self.completed = _payloads(events)
                raise
        return _payloads(events)

    def _continue(self, data: bytes) -> list[bytes]:
        """An event is held: find its end in ``data`` (or across the read boundary)."""
        parts = self._parts
        if data[:1] == b"\n" and parts[-1].endswith(b"\n"):
            # The blank line straddles the reads: the event ends before the held LF.
            parts[-1] = parts[-1][:-1]
            end, skip = 0, 1
        else:
            end = data.find(b"\n\n")
            if end < 0:
                if data:
                    self._hold(data)
                return []
            skip = end + 2
        self._check(self._pending + end)
        parts.append(data[:end])
        event = b"".join(parts)
        parts.clear()
        self._pending = 0
        out = _payloads([event])
        rest = data[skip:]
        if rest:
            self.scanned += len(rest)
            try:
                out += self._split(rest)
            except StreamProtocolError:
                self.completed[:0] = out
                raise
        return out

    def _hold(self, data: bytes) -> None:
        self._parts.append(data)
        self._pending += len(data)
        self._check(self._pending)

    def _check(self, size: int) -> None:
        if size > self.max_event_bytes:
            self._refuse(size, [])

    def _refuse(self, size: int, completed: list[bytes]) -> None:
        """An event of ``size`` bytes is too long; ``completed``: the payloads of the events
        that ended before it in this read."""
        self._parts.clear()
        self._pending = 0
        self.completed = completed
        where = f" from {self._endpoint}" if self._endpoint else ""
        raise StreamProtocolError(
            f"an SSE event{where} is longer than max_event_bytes={self.max_event_bytes} "
            f"(at least {size} bytes before its blank line)",
            endpoint=self._endpoint,
        )

    def flush(self) -> list[bytes]:
        """End of stream: return the payload of a last event that had no blank line after it."""
        rest = b"".join(self._parts)
        self._parts.clear()
        self._pending = 0
        if self._cr == 1:
            rest += b"\n"
        self._cr = 0
        self._bom = b""  # a BOM's first bytes alone: no event
        rest = rest.strip(b"\n")
        return _payloads([rest]) if rest else []

    @property
    def pending(self) -> int:
        """Bytes held back waiting for the rest of an event."""
        return self._pending + (self._cr == 1) + len(self._bom)


def _payloads(events: list[bytes]) -> list[bytes]:
    """The data payload of each event that has one (line ends already LF)."""
    out: list[bytes] = []
    for event in events:
        if event.startswith(b"data: ") and b"\n" not in event:
            out.append(event[6:])
        elif event:
            payload = _parse_event(event)
            if payload is not None:
                out.append(payload)
    if b"" in out:  # ``data: `` alone: a keep-alive (one C-level scan, not a test per event)
        out = [p for p in out if p]
    return out


def _parse_event(event: bytes) -> bytes | None:
    """The general case: several lines, comments, fields other than ``data``."""
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if name != b"data":
            continue  # event:, id:, retry: carry nothing chat streams need
        data.append(value[1:] if value.startswith(b" ") else value)
    payload = b"\n".join(data)
    return payload or None  # empty data: a keep-alive, not a chat payload
