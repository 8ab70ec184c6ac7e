"""Where a request goes (:class:`Endpoint`), how long it may take (:class:`Timeouts`),
and what it says (:class:`ChatRequest`)."""

from __future__ import annotations

import base64
import datetime
import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from agentflow._base_url import check_base_url
from agentflow._errors import ConfigError
from agentflow._redact import (
    display_url,
    redact_data,
    register_headers,
    register_secret,
    register_url,
)
from agentflow._request import ChatRequest, shown_headers
from agentflow._sendable import check_sendable
from agentflow._session_checks import SESSION_OWNS, check_header_text, check_headers

__all__ = ["ChatRequest", "Endpoint", "Timeouts", "parse_retry_after"]


@dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class Endpoint:
    """An OpenAI-compatible server.

    Args:
        base_url: up to and including ``/v1``, e.g. ``http://127.0.0.1:8000/v1``. A
            ``user:password@`` in it is never printed: names, errors, traces and ``repr``
            show the URL without it. No query string or fragment: ``/chat/completions``
            is appended to the path (a query, such as ``?api-version=…`` or a key, goes
            in ``headers`` or ``extra_body``). A host, a port from 1 to 65535 if one is
            given, no space or control character (``check_base_url``).
        api_key: sent as ``Authorization: Bearer …``; never logged, never in ``repr``. A
            ``str`` (or ``None``) without a control character.
        headers: extra headers on every request: a mapping of header names (RFC 9110
            tokens: no space, no ``:``) to ``str`` values without a control character but
            a tab. The values of credential headers (names ending in ``key``, ``token``,
            ``secret``, ``auth``…: ``api-key``, ``x-auth-token``) are masked like the key.
        extra_body: extra JSON fields on every request (e.g. vLLM's ``top_k``): a mapping
            JSON can carry, checked as ``Agent.params`` is. It may not set ``model``,
            ``messages``, ``tools``, ``stream`` or ``n``, which each request's session
            sets (its ``stream_options`` are merged with the session's).
        name: a label for reports; defaults to the host and port.

    Endpoints compare by every option and hash by ``base_url`` and ``name``.

    Raises:
        ConfigError: an option above is not what it says, naming it (never a header's
            or the key's value).
    """

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""
    _chat_url: str = field(default="", init=False, repr=False, compare=False)
    _basic_auth: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = check_base_url(self.base_url, "Endpoint.base_url")
        _check_options(self.api_key, self.headers, self.extra_body)
        if not isinstance(self.name, str):
            raise ConfigError(f"Endpoint.name must be a str, got {type(self.name).__name__}")
        for key in self.headers:
            if key.lower() == "authorization":
                raise ConfigError("Endpoint.headers must not carry Authorization; use api_key")
        # Known before anything can print them: masked by value from here on.
        # Forgotten when the last endpoint holding them is collected.
        register_secret(self.api_key, owner=self)
        register_headers(self.headers, owner=self)
        register_url(self.base_url, owner=self)
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        # Userinfo is sent as HTTP Basic auth (as aiohttp and the OpenAI SDK do) by every
        # transport alike, and never as part of the URL.
        object.__setattr__(self, "_chat_url", f"{display_url(self.base_url)}/chat/completions")
        if parts.username is not None or parts.password is not None:
            if self.api_key:
                raise ConfigError(
                    "Endpoint: give either api_key or a user:password@ in base_url, not both"
                )
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            object.__setattr__(self, "_basic_auth", f"Basic {token}")
        if not self.name:
            object.__setattr__(self, "name", parts.netloc.rpartition("@")[2])

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # A copy or an unpickled endpoint (a worker's) is built again, so that it holds
        # its secrets too: they stay masked while it lives, whatever became of this one.
        return (
            _rebuilt,
            (type(self), self.base_url, self.api_key, dict(self.headers),
             dict(self.extra_body), self.name),
        )  # fmt: skip

    def __hash__(self) -> int:
        # Equal endpoints have equal URLs and names (``headers`` and ``extra_body`` are
        # dicts, unhashable: the generated hash raised TypeError): one can key a dict.
        return hash((self.base_url, self.name))

    def __repr__(self) -> str:
        return (
            f"Endpoint(base_url={display_url(self.base_url)!r}, "
            f"headers={shown_headers(self.headers)!r}, "
            f"extra_body={redact_data(dict(self.extra_body))!r}, name={self.name!r})"
        )

    @property
    def chat_url(self) -> str:
        """The chat-completions URL (without userinfo: that goes as Basic auth)."""
        return self._chat_url

    def request_headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Headers for one request: content type, auth, the endpoint's and the request's own."""
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        h.update(self.headers)
        if extra:
            h.update(extra)
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        elif self._basic_auth is not None:
            h["Authorization"] = self._basic_auth
        return h


def _check_options(api_key: object, headers: object, extra_body: object) -> None:
    """Raise :class:`ConfigError` naming the option unless ``api_key`` is a ``str`` (or
    ``None``) and ``headers`` a mapping of header names (RFC 9110 tokens) to ``str``
    values, neither holding a line break or another control character but a tab, and
    ``extra_body`` a mapping JSON can carry. (Each used to fail every session, with a
    ``TypeError`` or ``AttributeError``, or a bad header name every request at the
    server; ``api_key=5`` raised a bare ``TypeError``.) Values are not shown: they may
    be credentials."""
    if api_key is not None:
        if not isinstance(api_key, str):
            raise ConfigError(
                f"Endpoint.api_key must be a str or None, got {type(api_key).__name__}"
            )
        check_header_text(api_key, "Endpoint.api_key", _HEADER_REASON)
    check_headers(headers, "Endpoint.headers", _HEADER_REASON)
    if not isinstance(extra_body, Mapping):
        raise ConfigError(
            "Endpoint.extra_body must be a mapping of body fields (a dict), "
            f"got {type(extra_body).__name__}"
        )
    owned = SESSION_OWNS.intersection(extra_body)
    if owned:  # merged last, they replaced what the session sends, without a word
        raise ConfigError(
            f"Endpoint.extra_body may not set {sorted(owned)}: each request's session sets "
            "them (the agent's model, the conversation, its tools; streaming, one choice)"
        )
    check_sendable(dict(extra_body), "Endpoint.extra_body")


#: Why a header value cannot hold a control character, in Endpoint's errors (which, as a
#: session id's, never show the value: it may be a credential).
_HEADER_REASON = (
    "which a header cannot carry (a line break would end it, and could add headers of its own)"
)


def _rebuilt(
    cls: type[Endpoint],
    base_url: str,
    api_key: str | None,
    headers: dict[str, str],
    extra_body: dict[str, Any],
    name: str,
) -> Endpoint:
    """An :class:`Endpoint` unpickled or copied: constructed, so it registers its secrets."""
    return cls(
        base_url=base_url, api_key=api_key, headers=headers, extra_body=extra_body, name=name
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Time limits for one streamed request (one attempt), in seconds; ``None`` means no limit.

    Args:
        connect: to open a connection (TCP, and TLS for https).
        first_token: from sending the request to the first output-bearing chunk.
        idle: the longest wait for an SSE *data event*: from sending the request to the
            first one, then between two. Response headers, SSE comments (``: ping``) and
            events without data do not count, so a server that only sends keep-alives
            is timed out like a silent one. The first wait includes the server's queue
            and the prompt's prefill, hence the generous default.
        total: for the whole request, from sending it to the end of the stream. The
            default, 30 minutes, covers a 1M-token prompt's prefill (minutes) and then
            ~100k output tokens at 100 tokens/s; raise it for longer generations.

    Worst case with the defaults: a server that accepts the connection and never sends
    a data event fails each attempt after ``idle`` (300 s); with the default
    ``RetryPolicy(max_attempts=4)`` a turn ends after 4 × 300 s plus its backoff waits
    (at most 0.5 + 1 + 2 s). A stream that keeps sending data events slowly ends at
    ``total`` per attempt.
    """

    connect: float | None = 10.0
    first_token: float | None = None
    idle: float | None = 300.0
    total: float | None = 1800.0

    def __post_init__(self) -> None:
        for name in ("connect", "first_token", "idle", "total"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"Timeouts.{name} must be > 0 or None, got {value!r}")
            if value == float("inf"):
                raise ConfigError(f"Timeouts.{name} must be finite (None means no limit)")


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), a
    finite number ≥ 0, or ``None`` when the value is neither.

    Delta-seconds are ASCII digits (a fraction is taken too); ``float()``'s other forms
    (``inf``, ``1e400``, ``1_0``, ``nan``, other scripts' digits) are not: an infinite
    wait is no wait a server can mean.

    Every HTTP date is GMT (RFC 9110), also the asctime form, which has no zone, and a
    ``-0000`` zone: ``parsedate_to_datetime`` returns those naive, and a naive
    datetime's ``timestamp()`` would read it as this machine's local time. A date
    Python cannot hold (a year of eleven digits) is garbage too: ``None``.
    """
    if not value:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        seconds = float(value)
        return seconds if math.isfinite(seconds) else None  # 400 digits: inf
    try:  # a year past what a C int holds is an OverflowError, not a ValueError
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        at = when.timestamp()
    except (TypeError, ValueError, OverflowError):
        return None
    return max(0.0, at - (time.time() if now is None else now))


#: Retry-After's delta-seconds: ASCII digits, and a fraction some servers send.
_DELTA_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)
