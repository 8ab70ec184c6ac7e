"""A small Server-Sent Events splitter: bytes in, ``data`` payloads out.

Only what chat-completion streams use is kept: ``data:`` fields (several in one
event are joined with ``\\n``), comments (``: ping``) and other fields are
skipped. Line ends may be ``\\n``, ``\\r\\n`` or ``\\r``, and any event or line
may be split across reads. The common case — one ``data:`` line per event, LF
line ends — takes one ``split`` and one slice per event.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Incremental SSE decoder; feed it reads in order, get back complete payloads."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add one read; return the ``data`` payload of every event it completed."""
        if (
            not self._buf
            and data.startswith(b"data: ")
            and data.endswith(b"\n\n")
            and data.count(b"\n") == 2
            and b"\r" not in data
        ):
            # A paced stream's usual read: exactly one whole single-line event.
            return [data[6:-2]]
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF split across reads.
            tail = b""
            if buf.endswith(b"\r"):
                buf, tail = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            events = buf.split(b"\n\n")
            self._buf = events.pop() + tail
        else:
            events = buf.split(b"\n\n")
            self._buf = events.pop()
        out: list[bytes] = []
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                out.append(event[6:])
            elif event:
                payload = _parse_event(event)
                if payload is not None:
                    out.append(payload)
        return out

    def flush(self) -> list[bytes]:
        """End of stream: return the payload of a last event that had no blank line after it."""
        rest, self._buf = self._buf, b""
        rest = rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n")
        if not rest:
            return []
        payload = _parse_event(rest)
        return [] if payload is None else [payload]

    @property
    def pending(self) -> int:
        """Bytes held back waiting for the rest of an event."""
        return len(self._buf)


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
    return b"\n".join(data) if data else None
