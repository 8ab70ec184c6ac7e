"""What every transport does the same way once a response is in: errors and the end of stream."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Self

import msgspec

from agentflow._errors import (
    APIStatusError,
    ConfigError,
    ConnectError,
    StreamInterrupted,
    UnexpectedContentType,
)
from agentflow._redact import display_url, redact, redact_bytes, redact_headers
from agentflow._trace import TurnTrace
from agentflow.transport._decode import decode_json
from agentflow.transport._request import Endpoint, Timeouts, parse_retry_after
from agentflow.transport._sse import DEFAULT_MAX_EVENT_BYTES, check_max_event_bytes
from agentflow.transport._status import api_status_error, redirect_note
from agentflow.transport._stream import finish_stream
from agentflow.typing import Clock

__all__ = [
    "MAX_ERROR_BODY",
    "EndpointTransport",
    "check_connect_retries",
    "content_type_error",
    "finish_stream",
    "keep_headers",
    "refused_content_type",
    "sent_then_closed",
    "status_error",
]

#: The most of an error body any transport reads.
MAX_ERROR_BODY = 64 * 1024


class EndpointTransport:
    """What both HTTP transports share: one endpoint, its limits and clock, and the
    resending of a request that cannot have reached the server.

    A plain loop, not tenacity: only such a failure (:class:`ConnectError`: no connection,
    or a reused kept-alive connection closed before any response byte) is resent here —
    the server did not see the request; the retry *policy* lives above the transport.
    """

    #: Attributes made once the transport is used (bound to that event loop and process,
    #: or not picklable): left out of a pickled copy (:meth:`__getstate__`), which makes
    #: its own.
    _LOOP_BOUND: ClassVar[tuple[str, ...]] = ("_bound_pid",)

    def __init__(
        self, endpoint: Endpoint | str, *, timeouts: Timeouts | None, connect_retries: int,
        clock: Clock, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:  # fmt: skip
        owner = type(self).__name__
        self._endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint(base_url=endpoint)
        if timeouts is not None and not isinstance(timeouts, Timeouts):
            raise ConfigError(f"{owner}.timeouts must be a Timeouts, got {timeouts!r}")
        self._timeouts = timeouts or Timeouts()
        self._connect_retries = check_connect_retries(connect_retries, owner)
        #: The longest SSE event accepted, in bytes (a longer one: StreamProtocolError).
        self.max_event_bytes = check_max_event_bytes(max_event_bytes, owner)
        self._clock = clock
        #: Requests resent because the connection failed before any response byte.
        self.reconnects = 0
        self._bound_pid: int | None = None  # the process that bound the connections' loop

    @property
    def endpoint(self) -> str:
        """The base URL requests go to, without userinfo (the label errors and traces use)."""
        return display_url(self._endpoint.base_url)

    @property
    def config(self) -> Endpoint:
        """The endpoint configuration."""
        return self._endpoint

    async def _resending(self, once: Callable[[int], Awaitable[TurnTrace]]) -> TurnTrace:
        """``once(attempt)``, again on :class:`ConnectError` up to ``connect_retries`` times."""
        for attempt in range(self._connect_retries + 1):
            try:
                return await once(attempt)
            except ConnectError:
                if attempt == self._connect_retries:
                    raise
                self.reconnects += 1
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_loop(self, bound: asyncio.AbstractEventLoop | None) -> bool:
        """Whether the connections made on ``bound`` can be dropped for the running
        loop's: ``False`` if ``bound`` is the running loop (or none), ``True`` if it has
        ended (:meth:`_loop_ended`). The caller binding new connections to the running
        loop then calls :meth:`_bound_here`.

        Raises:
            ConfigError: ``bound`` still runs (in another thread): its streams use those
                connections, which cannot be shared with, nor closed from, this loop.
        """
        if bound is None or bound is asyncio.get_running_loop():
            return False
        if not self._loop_ended(bound):
            raise ConfigError(
                f"{self!r} is in use on another event loop that still runs (another "
                "thread's): a transport's connections belong to one event loop at a time; "
                "make one transport per event loop"
            )
        return True

    def _bound_here(self) -> None:
        """The connections are now made on the running loop, in this process."""
        self._bound_pid = os.getpid()

    def _forked(self) -> bool:
        """Whether the connections were made in another process: this one is a child
        forked from it, which inherited their sockets (they are the parent's: a child
        closing them would unregister them from the parent's selector too, which shares
        its epoll set, and stall the parent's next request on them)."""
        return self._bound_pid is not None and self._bound_pid != os.getpid()

    def _loop_ended(self, bound: asyncio.AbstractEventLoop) -> bool:
        """Whether ``bound``, the loop this transport's connections were made on, has
        ended: closed, no longer running (a second ``asyncio.run``), or another
        process's — a child forked from inside a running loop (``multiprocessing``'s
        default on Linux) inherits it still reporting itself running, and was refused
        as if another thread ran it."""
        return bound.is_closed() or not bound.is_running() or self._forked()

    def __getstate__(self) -> dict[str, Any]:
        """A pickled copy (a worker's, ``Fleet(workers=N)``) goes without what binds this
        one to the event loop and process that used it (:attr:`_LOOP_BOUND`: its pool or
        sessions, the loop, the process id): it makes its own where it runs, as a new
        transport would. Everything it was configured with goes along."""
        state = self.__dict__.copy()
        for name in self._LOOP_BOUND:
            state[name] = None
        return state

    async def aclose(self) -> None:
        """Release connections."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint!r}, reconnects={self.reconnects})"


def check_connect_retries(value: object, owner: str) -> int:
    """``value`` if it is a valid ``connect_retries`` (an int ≥ 0), else a :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{owner}.connect_retries must be an int ≥ 0, got {value!r}")
    return value


#: Media types a streamed chat answer is refused for at once: a page or a whole document,
#: not an event stream. Others (``text/event-stream``, a missing header, ``text/plain``…)
#: are parsed as SSE and fail later, as malformed, if they are not.
_REFUSED_TYPES = frozenset({"text/html", "application/xhtml+xml", "text/xml", "application/xml"})


def sent_then_closed(endpoint: str, state: str, why: str, trace: TurnTrace) -> StreamInterrupted:
    """The error for a connection closed after carrying the request, before a whole
    response head (``state`` says how far one got; ``why`` how it closed): the server may
    have received the request, so it is not resent here — the retry policy judges."""
    return StreamInterrupted(
        f"connection to {endpoint} closed after the request was sent, with {state} "
        f"(the server may have received the request): {why}",
        endpoint=endpoint,
        trace=trace,
    )


def refused_content_type(status: int, headers: Any) -> str | None:
    """The ``Content-Type`` of a 2xx answer that cannot be an event stream, else ``None``.

    Refused: HTML, XML and JSON (``application/json``, ``*/*+json``, ``*/*+xml``) —
    a proxy's page, or a server that answered ``stream: true`` with one JSON document.
    """
    if not 200 <= status < 300:
        return None
    value = headers.get("Content-Type")
    if not value:
        return None
    media = str(value).split(";", 1)[0].strip().lower()
    if media in _REFUSED_TYPES or media.endswith(("/json", "+json", "+xml")):
        return str(value)
    return None


def content_type_error(
    status: int, content_type: str, body: bytes, endpoint: str
) -> UnexpectedContentType:
    """The error for a 2xx answer that is not an event stream, quoting its first bytes.

    The body (at most :data:`MAX_ERROR_BODY` bytes) is redacted whole before it is cut:
    a key the server echoed across the cut would leave its first characters, which
    no longer match the registered key, in the message and payload."""
    text = redact(body.decode("utf-8", "replace"))
    snippet = " ".join(text[:300].split())
    more = "…" if len(text) > 300 else ""
    return UnexpectedContentType(
        f"{endpoint} answered {status} with Content-Type {content_type!r}, not "
        f"text/event-stream (a streamed request); the body begins: {snippet!r}{more}",
        content_type=content_type,
        status=status,
        endpoint=endpoint,
        payload=redact_bytes(body)[:500],
    )


async def status_error(
    status: int, headers: Any, body_reader: Any, endpoint: str
) -> APIStatusError:
    """Build the :class:`APIStatusError` subclass for a non-2xx answer (a 4xx saying the
    prompt is too long: :class:`~agentflow.ContextLengthExceeded`, with its numbers)."""
    raw: bytes = await body_reader
    body: Any
    try:
        body = decode_json(raw, msgspec.json.decode) if raw else None
    except msgspec.DecodeError:  # not JSON, or nested too deep: kept as text
        body = raw.decode("utf-8", "replace")
    lead = f"{endpoint} answered {status}"
    if 300 <= status < 400:
        lead += redirect_note(headers.get("Location"), endpoint)
    return api_status_error(
        status,
        body,
        endpoint,
        lead=lead,
        retry_after=parse_retry_after(headers.get("Retry-After")),
    )


def keep_headers(headers: Any) -> dict[str, str]:
    """The response headers traces keep: every ``x-*`` one, names lower-cased, the values
    of credential-named ones masked (``redact_headers``).

    ``headers``: a mapping with ``items()`` (names and values as text), or name–value
    pairs of text or bytes (httpx's ``Headers.raw``). The same on every transport: a
    header sent several times is one value, joined with ``", "`` (as the openai SDK
    reads them), and each value is UTF-8 if it is valid UTF-8, else Latin-1 (what its
    bytes say) — never the surrogate escapes aiohttp's and httptools' decoding leave,
    which no JSON encoder (the run store's) can write.
    """
    pairs = headers.items() if hasattr(headers, "items") else headers
    kept: dict[str, str] = {}
    for name, value in pairs:
        if name[:2].lower() in ("x-", b"x-"):
            key = _text(name).lower()
            text = _text(value)
            kept[key] = f"{kept[key]}, {text}" if key in kept else text
    return redact_headers(kept.items())


def _text(s: str | bytes) -> str:
    """``s`` as text any encoder takes: UTF-8, else Latin-1 (also for the bytes that
    surrogate escapes stand for)."""
    if isinstance(s, bytes):
        try:
            return s.decode()
        except UnicodeDecodeError:
            return s.decode("latin-1")
    if s.isascii():
        return s
    try:
        s.encode()
    except UnicodeEncodeError:
        try:
            return s.encode("utf-8", "surrogateescape").decode("latin-1")
        except UnicodeEncodeError:  # a lone surrogate that is not an escaped byte
            return s.encode("utf-8", "replace").decode()
    return s
