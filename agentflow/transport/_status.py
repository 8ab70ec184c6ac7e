"""A server's error answer → the :class:`APIStatusError` subclass its status calls for.

One choice for an error status (``status_error`` in ``_shared.py``) and for an error
object a server sends inside an open stream (``TraceBuilder.feed``): a 429 is a
:class:`RateLimitError`, a 4xx saying the prompt is too long a
:class:`~agentflow.ContextLengthExceeded` (with its numbers), a 408 a plain
:class:`APIStatusError` (the server gave up waiting for the request: resending may well
work, so it is not a :class:`BadRequestError`, and the default ``RetryPolicy`` retries it),
another 4xx a :class:`BadRequestError`, a 5xx a :class:`ServerError`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

from agentflow._errors import APIStatusError, BadRequestError, RateLimitError, ServerError
from agentflow._redact import display_url, redact
from agentflow.transport._overflow import context_length_error, parse_context_length

__all__ = ["api_status_error", "error_message", "redirect_note", "stream_error_status"]

#: 408 Request Timeout: the server stopped waiting for the request. Not the request's
#: fault (a BadRequestError said "resending will not help" while the retry policy resent it).
_REQUEST_TIMEOUT = 408


def api_status_error(
    status: int, body: Any, endpoint: str, *, lead: str, retry_after: float | None = None
) -> APIStatusError:
    """The error for ``status`` with the (parsed) error ``body``; its message is ``lead``,
    then the server's own message."""
    message = error_message(body) or f"HTTP {status}"
    too_long = context_length_error(status, body, message, endpoint, lead=lead)
    if too_long is not None:
        return too_long
    cls = (
        RateLimitError
        if status == 429
        else ServerError
        if status >= 500
        else BadRequestError
        if status >= 400 and status != _REQUEST_TIMEOUT
        else APIStatusError
    )
    return cls(
        f"{lead}: {message}",
        status=status,
        body=body,
        retry_after=retry_after,
        endpoint=endpoint,
    )


def redirect_note(location: str | None, endpoint: str) -> str:
    """For a redirect's message: where it points (made absolute; without userinfo, query
    or fragment, which may carry credentials) and what to do, or ``""`` without one."""
    if not location:
        return ""
    try:
        parts = urlsplit(urljoin(f"{endpoint}/chat/completions", location.strip()))
        where = display_url(f"{parts.scheme}://{parts.netloc}{parts.path}")
    except ValueError:
        return " (a redirect, with a Location that is not a URL)"
    more = "?…" if parts.query or parts.fragment else ""
    return (
        f" (a redirect to {redact(where)}{more}, not followed: point base_url at the new location)"
    )


def stream_error_status(error: Any) -> int:
    """The HTTP status an error object sent inside a stream stands for: its ``code`` when
    that is one (an int or a numeric string, 400–599); without one, 400 if its message
    is a "prompt too long" refusal, else 500."""
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and code.isascii() and code.isdigit() and len(code) <= 3:
        code = int(code)  # (not '²': str.isdigit() takes it, int() does not)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        return code
    message = error_message(error)
    if message and parse_context_length(error, message) is not None:
        return 400
    return 500


def error_message(body: Any) -> str | None:
    """The human-readable message of an error body (OpenAI's ``{"error": {"message"}}``,
    FastAPI's ``{"detail"}``, a bare string), or ``None``."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail")
            return str(msg) if msg is not None else None
        if isinstance(err, str):
            return err
        detail = body.get("detail") or body.get("message")
        return str(detail) if detail is not None else None
    if isinstance(body, str) and body:
        return redact(body)[:300]  # redacted before the cut, which may split a key
    return None
